"""Planted errors: a wrong formula or a typo in the data must stop the build of the page that shows the number
(issue 16). Each plant is a realistic mistake made once, in a scratch copy of the repository (the tree without
.git and .venv), followed by a strict build of ONLY the affected page (DISTLAB_ONLY), sharing one result cache so
that the page's unaffected experiments come from it. The build must fail on a *value* claim of that page, named
in the error: not on noise (a timing claim), not on an exception, not on another page's claim.

The plants run two at a time (the CI machine has two cores). Maintainers add plants here; a plant whose `old`
text no longer occurs exactly once fails loudly, so plants cannot silently stop planting.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IGNORED = (".git", ".venv", "site", ".cache", "screenshots", "__pycache__", ".pytest_cache", ".ruff_cache")


@dataclass(frozen=True)
class Plant:
    what: str
    """The mistake, as a reviewer would describe it."""
    path: str
    old: str
    new: str
    page: str
    claim: str | tuple[str, ...]
    """Text of the claim's name that must appear in the build's error (the claim that guards the number); a tuple
    when any of several claims of the page may be the first to fail (experiments run in page order)."""


PLANTS = [
    Plant(
        "the H100's HBM bandwidth typed wrong in gpus.toml (chapter 2's ridge point moves)",
        "distlab/data/gpus.toml",
        "hbm_tbps = 3.35",
        "hbm_tbps = 3.53",
        "02-gpu-mental-model.md",
        "H100-SXM: HBM bandwidth = bus",
    ),
    Plant(
        "the H100's SM count typed wrong",
        "distlab/data/gpus.toml",
        "bf16_sparse_tflops = 1979\nsms = 132\nl2_mib = 50",
        "bf16_sparse_tflops = 1979\nsms = 123\nl2_mib = 50",
        "02-gpu-mental-model.md",
        "H100-SXM: FP32 lanes = SMs",
    ),
    Plant(
        "the roofline's square-GEMM intensity written 2n/2b instead of 2n/3b",
        "distlab/gpu/roofline.py",
        "return 2 * n / (3 * bytes_per_element)",
        "return 2 * n / (2 * bytes_per_element)",
        "02-gpu-mental-model.md",
        "large GEMM: counted intensity = closed form",
    ),
    Plant(
        "fp8 e4m3's largest value computed as IEEE (480 instead of 448)",
        "distlab/precision/number_formats.py",
        "largest_mantissa = 2 - 2.0**-m if self.ieee else 2 - 2.0 ** -(m - 1)",
        "largest_mantissa = 2 - 2.0**-m",
        "04-mixed-precision.md",
        "fp8 e4m3: torch's bits, max",
    ),
    Plant(
        "the ring all-reduce's 2(N-1)/N of the buffer written (N-1)/N",
        "distlab/data_parallel/ring_allreduce.py",
        "return 2 * (ranks - 1) / ranks * buffer_bytes",
        "return (ranks - 1) / ranks * buffer_bytes",
        "05-data-parallel.md",
        "2(N-1)/N",
    ),
    Plant(
        "ZeRO-2 keeps full gradients (shards them only from stage 3)",
        "distlab/sharding/zero.py",
        '"grads": shard if zero >= 2 else params,',
        '"grads": shard if zero >= 3 else params,',
        "06-sharded-data-parallel.md",
        "ZeRO-2",
    ),
    Plant(
        "ZeRO-3 traffic counted as two phases instead of three",
        "distlab/sharding/zero.py",
        'out["all_gather_bytes"] = 2 * m * phase if zero == 3 else phase',
        'out["all_gather_bytes"] = m * phase if zero == 3 else phase',
        "06-sharded-data-parallel.md",
        "ZeRO-3 / DDP traffic",
    ),
    Plant(
        "a ring all-reduce's bus factor 2(p-1)/p written (p-1)/p (tensor parallelism's bytes, chapter 7)",
        "distlab/hardware/collectives.py",
        "return 2 * (p - 1), 2.0 * (p - 1) / p",
        "return 2 * (p - 1), 1.0 * (p - 1) / p",
        "07-model-parallel.md",
        ("TP all-reduce time over matmul time", "sequence parallel sends the same bytes as the all-reduces"),
    ),
    Plant(
        "standard attention's HBM reads of Q and K for QK^T halved",
        "distlab/attention/hbm_traffic.py",
        '("S = QK^T", Traffic(reads=2 * n * d,',
        '("S = QK^T", Traffic(reads=n * d,',
        "08-flash-attention.md",
        "standard attention HBM traffic = 12Nd + 11N^2",
    ),
    Plant(
        "FlashAttention's forward FLOPs counted for one matmul instead of two",
        "distlab/attention/hbm_traffic.py",
        "flops += 4 * rows * cols * d  # S_ij = Q_i K_j^T and P_ij V_j",
        "flops += 2 * rows * cols * d  # S_ij = Q_i K_j^T and P_ij V_j",
        "08-flash-attention.md",
        "FlashAttention matmul FLOPs = 14 N^2 d",
    ),
    Plant(
        "Young's interval sqrt(2CM) written sqrt(CM)",
        "distlab/throughput/young_daly.py",
        '    """Young\'s interval sqrt(2 C M)."""\n    return math.sqrt(2 * save_s * mtbf_s)',
        '    """Young\'s interval sqrt(2 C M)."""\n    return math.sqrt(save_s * mtbf_s)',
        "10-throughput-debugging.md",
        "Young",
    ),
    Plant(
        "a Chinchilla constant changed in scaling_laws.toml",
        "distlab/data/scaling_laws.toml",
        'source = "hoffmann2022"\nE = 1.69\nA = 406.4',
        'source = "hoffmann2022"\nE = 1.69\nA = 460.4',
        "11-scaling-laws.md",
        "Chinchilla",
    ),
    Plant(
        "the activation term divided by h instead of h t",
        "distlab/memory/activations.py",
        "attention_core = 5 * heads * seq / (hidden * t)",
        "attention_core = 5 * heads * seq / hidden",
        "03-activation-memory.md",
        "activation",
    ),
    Plant(
        "the MFU band's largest corpus error typed wrong in planner.toml (every quoted band widens)",
        "distlab/data/planner.toml",
        "error_max = 0.2027",
        "error_max = 0.3027",
        "14-worked-plan-7b.md",
        "stored MFU band",
    ),
    Plant(
        "InfiniBand NDR's port rate typed 200 instead of 400 Gb/s (chapter 5's cross-node ring, issue 26)",
        "distlab/data/interconnect.toml",
        '[InfiniBand-NDR]\nsource = "ibta-roadmap"\ngbits_per_s_per_direction = 400',
        '[InfiniBand-NDR]\nsource = "ibta-roadmap"\ngbits_per_s_per_direction = 200',
        "05-data-parallel.md",
        "QM9700",
    ),
    Plant(
        "context parallelism's causal overlap threshold with its factor 2 dropped (chapter 7, issue 26)",
        "distlab/model_parallel/context_parallel.py",
        'r.add("overlap_tokens_per_rank_causal", 2 * c_min,',
        'r.add("overlap_tokens_per_rank_causal", c_min,',
        "appendix-07-context-expert-deep-dive.md",
        "at the causal threshold",
    ),
    Plant(
        # issue 25's done-when: an edit that makes a plan need recomputation must change the practice prose or fail
        # its build. Here every micro-batch's activations are sized for two sequences: the 13B fine-tune's ZeRO-3
        # plan can no longer keep one sequence without recomputing, which practice 1 says it does.
        "the activation model sizes every micro-batch twice (practice 1's ZeRO-3 plan now needs recomputation)",
        "distlab/memory/activations.py",
        "            seq,\n            batch,\n            attention=attention,",
        "            seq,\n            2 * batch,\n            attention=attention,",
        "practice/01-will-13b-fit.md",
        ("'ZeRO-3 keeps one whole sequence's activations'", "fits without recomputation"),
    ),
    Plant(
        "calculator.js shards gradients from ZeRO-3 instead of ZeRO-2",
        "docs/assets/calculator.js",
        "per.grads * (inp.zero >= 2 ? rank : shard)",
        "per.grads * (inp.zero >= 3 ? rank : shard)",
        "calculator.md",
        "calculator",
    ),
    Plant(
        "the KV cache counted without its factor 2 (K only, not K and V)",
        "distlab/memory/kv_cache.py",
        "return 2 * self.layers * self.kv_heads * self.head_dim",
        "return self.layers * self.kv_heads * self.head_dim",
        "appendix-03-activation-memory-deep-dive.md",
        "kv_cache_bytes() = the counted bf16 cache",
    ),
    Plant(
        "DeepSeek-V3's MLA latent width typed 521 instead of 512 (its KV cache per token moves)",
        "distlab/data/moe_models.toml",
        "kv_lora_rank = 512",
        "kv_lora_rank = 521",
        "appendix-03-activation-memory-deep-dive.md",
        "DeepSeek-V3 per token: our formula vs the paper's Table 1",
    ),
    Plant(
        "MX's OCP scale rule with e4m3's emax off by one (7 instead of 8)",
        "distlab/precision/block_formats.py",
        "E4M3_EMAX = 8  #",
        "E4M3_EMAX = 7  #",
        "04-mixed-precision.md",
        ("ocp rule: amax / scale", "hand-worked block, OCP rule", "OCP landing range's low end"),
    ),
    Plant(
        "the B200's exponentials per clock and SM typed 61 instead of 16 (FlashAttention-4's wall disappears)",
        "distlab/data/flash_attention4.toml",
        "exp_per_clock_sm = 16",
        "exp_per_clock_sm = 61",
        "08-flash-attention.md",
        "B200 exp/matmul at d = 128",
    ),
]


def _copy_tree(dest: Path) -> None:
    shutil.copytree(REPO, dest, ignore=shutil.ignore_patterns(*IGNORED), symlinks=True)


def plant_and_build(plant: Plant, root: Path, cache: Path) -> subprocess.CompletedProcess:
    """Copy the tree to root/tree, make the plant's change, build its page alone."""
    tree = root / "tree"
    _copy_tree(tree)
    target = tree / plant.path
    text = target.read_text(encoding="utf-8")
    assert text.count(plant.old) == 1, f"plant {plant.what!r}: {plant.old!r} occurs {text.count(plant.old)} times"
    target.write_text(text.replace(plant.old, plant.new), encoding="utf-8")
    env = os.environ | {
        "DISTLAB_ONLY": plant.page,
        "DISTLAB_CACHE": str(cache),
        "PYTHONPATH": str(tree),  # the scratch copy's distlab, not the installed one
        "NO_MKDOCS_2_WARNING": "1",
        "DISABLE_MKDOCS_2_WARNING": "true",
    }
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(root / "site")],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory) -> Path:
    """A copy of the build's result cache (the suite's built_site fills it when it runs first; alone, the plants
    fill it as they go): unaffected experiments come from it, and the real cache is never written."""
    cache = tmp_path_factory.mktemp("planted") / "cache"
    source = Path(os.environ.get("DISTLAB_CACHE", REPO / ".cache" / "distlab"))
    if source.is_dir():
        shutil.copytree(source, cache)
    else:
        cache.mkdir()
    return cache


@pytest.fixture(scope="session")
def outcomes(shared_cache, tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    root = tmp_path_factory.mktemp("plants")
    plants = PLANTS
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            p.what: pool.submit(plant_and_build, p, root / f"plant{i}", shared_cache) for i, p in enumerate(plants)
        }
        return {what: f.result() for what, f in futures.items()}


def test_there_are_at_least_ten_plants_on_distinct_pages_and_kinds():
    assert len(PLANTS) >= 10
    assert len({p.page for p in PLANTS}) >= 5
    assert any(p.path.endswith(".toml") for p in PLANTS) and any(p.path.endswith(".py") for p in PLANTS)


@pytest.mark.parametrize("plant", PLANTS, ids=[p.what for p in PLANTS])
def test_a_planted_error_fails_the_build_of_its_page(plant, outcomes):
    """The build of the page that shows the number fails, on a value claim of that page naming the guard: would
    catch a number that reaches its page with no claim of its own (6 of issue 16's 22 plants passed a strict
    build), or a guard that is a timing claim (noise, re-measured) instead of a value claim."""
    proc = outcomes[plant.what]
    err = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"the build of {plant.page} passed with the plant: {plant.what}"
    assert f"page {plant.page}: value claim" in err, err[-3000:]
    line = next(x for x in err.splitlines() if f"page {plant.page}: value claim" in x)
    names = plant.claim if isinstance(plant.claim, tuple) else (plant.claim,)
    assert any(name in line for name in names), line
