"""The planner's search and its CLI: every plan tiles the cluster and fits, a fixed layout is kept, the JSON keys
stay, impossible requests end in one line and exit 2, the search is fast and imports neither numpy nor torch."""

import json
import subprocess
import sys
import time

import pytest

from distlab.models.shapes import preset
from distlab.planner.config import Training, cluster, usable_bytes
from distlab.planner.kernels import matmul_fraction
from distlab.planner.search import NothingFits, search

H100 = cluster("H100-SXM", nodes=1)


def test_search_70b_on_64_gpus():
    """Every returned plan tiles the 64 GPUs, keeps TP inside a node, fits, and after the recommended plan (the
    headroom rule, issue 25) the list is fastest first."""
    m = preset("70B")
    c = cluster("H100-SXM", nodes=8)
    t = Training(global_batch_tokens=4 * 1024 * 1024, seq=4096)
    ranked = search(m, c, t)
    budget = usable_bytes(c.gpu)
    assert ranked
    for e in ranked:
        p = e.plan
        assert p.tp * p.pp * p.dp * p.cp == 64 and p.tp <= 8
        assert e.memory_bytes <= budget
        assert p.dp * p.micro_batch * p.microbatches * 4096 == t.global_batch_tokens
    head = [e.step_seconds for e in ranked[1:8]]
    assert head == sorted(head)
    assert ranked[0].headroom_fraction >= 0.08


def test_7b_ddp_does_not_fit_on_80gb():
    """16 bytes x 6.74e9 = 108 GB of model state: no unsharded, unsplit plan can fit an 80 GB GPU."""
    m = preset("7B")
    t = Training(global_batch_tokens=64 * 4096, seq=4096)
    with pytest.raises(NothingFits, match="nothing fits"):
        search(m, H100, t, where=lambda p: p.zero == 0 and p.tp == 1 and p.pp == 1)


def test_a_fixed_layout_is_kept_and_the_rest_searched():
    """distlab plan --tp 4 --pp 2: every plan returned has TP 4 and PP 2; with every dimension fixed exactly one
    plan comes back. Would catch a fixed flag ignored by the search."""
    m = preset("70B")
    c = cluster("H100-SXM", nodes=8)
    t = Training(global_batch_tokens=4 * 1024 * 1024, seq=4096)
    ranked = search(m, c, t, fixed={"tp": 4, "pp": 2})
    assert ranked and all((e.plan.tp, e.plan.pp) == (4, 2) for e in ranked)
    every = {"tp": 8, "pp": 1, "dp": 8, "cp": 1, "ep": 1, "zero": 1, "micro_batch": 1, "recompute": "none"}
    every |= {"schedule": "1f1b", "virtual": 1, "offload": "none"}
    assert len(search(m, c, t, fixed=every)) == 1


def test_a_fixed_layout_that_cannot_run_says_why():
    """A layout that does not fit names the reason: 70B with TP 1, PP 1 and DDP needs its 16 bytes x 69 B
    parameters on every GPU."""
    m = preset("70B")
    c = cluster("H100-SXM", nodes=8)
    t = Training(global_batch_tokens=4 * 1024 * 1024, seq=4096)
    with pytest.raises(NothingFits) as exc:
        search(m, c, t, fixed={"tp": 1, "pp": 1, "zero": 0, "offload": "none"})
    assert "\n" not in str(exc.value) and "GB" in str(exc.value)


def test_70b_ranks_tp_x_pp_above_zero3():
    """The issue's finding: with per-layer, per-micro-batch ZeRO-3 the planner ranks TP x PP above FSDP for a
    70B model on 64 H100s at a 4M-token batch, as practitioners and published comparisons do."""
    m = preset("70B")
    c = cluster("H100-SXM", nodes=8)
    t = Training(global_batch_tokens=4 * 1024 * 1024, seq=4096)
    best = search(m, c, t)[0]
    zero3 = search(m, c, t, fixed={"pp": 1, "zero": 3})[0]
    assert best.plan.pp > 1 and best.plan.zero < 3 and zero3.step_seconds > best.step_seconds


def test_rules_shape_every_search_but_not_restricted_ones():
    """7B fine-tune on 8 GPUs: ZeRO-1 fits without a pipeline, so the plain search (chapter 7's rules)
    tries none, while a search restricted to PP 4 (a question about that family) still finds one; TP never
    leaves the node. Would catch `where` searches losing the families the practice pages compare."""
    m = preset("7B")
    t = Training(global_batch_tokens=64 * 4096, seq=4096)
    assert all(e.plan.pp == 1 and e.plan.tp <= 8 for e in search(m, H100, t))
    piped = search(m, H100, t, where=lambda p: p.pp == 4)
    assert piped and all(e.plan.pp == 4 for e in piped)


def test_causal_mfu_counts_half_the_attention_and_stays_under_the_gemm_share():
    """At 131,072-token sequences the published MFU (6N + 12Lhs) counts the masked half of attention that
    FlashAttention skips. mfu_causal counts 6N + 6Lhs (Llama 2 7B: N from its checkpoint, L = 32, h = 4096,
    typed here) and must stay under the matmuls' share of the peak. Would catch mfu_causal dropping the wrong
    term, or the cost model timing more attention than it counts."""
    from distlab.planner.config import Plan
    from distlab.planner.cost import step

    n, layers, h, s = 6_738_415_616, 32, 4096, 131072
    c = cluster("H100-SXM", nodes=4)
    e = step(
        preset("7B"), c, Training(global_batch_tokens=32 * s, seq=s), Plan(dp=2, tp=4, cp=4, zero=2, microbatches=16)
    )
    full, causal = 6.0 * n + 12.0 * layers * h * s, 6.0 * n + 6.0 * layers * h * s
    assert e.mfu_causal == pytest.approx(e.mfu * causal / full, rel=1e-12)
    assert e.mfu_causal <= matmul_fraction(c.gpu) < e.mfu * 2


def distlab(*args):
    return subprocess.run([sys.executable, "-m", "distlab", *args], capture_output=True, text=True, timeout=120)


def test_done_when_command_prints_one_plan_with_the_keys():
    """The issue's done-when command: one plan, the old keys and the new ones (hfu, tflops_per_gpu,
    step_breakdown with its eight causes in seconds adding up to the step, mfu_band around the mfu)."""
    proc = distlab(
        "plan",
        "--model",
        "70B",
        "--gpu",
        "H100-SXM",
        "--nodes",
        "8",
        "--tp",
        "8",
        "--pp",
        "1",
        "--zero",
        "1",
        "--micro-batch",
        "1",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    plans = json.loads(proc.stdout)
    assert len(plans) == 1
    p = plans[0]
    old = {
        "dp",
        "tp",
        "pp",
        "cp",
        "zero",
        "micro_batch",
        "grad_accumulation",
        "recompute",
        "offload",
        "memory_bytes_per_gpu",
        "memory_by_category",
        "step_seconds",
        "time_by_component",
        "mfu",
        "mfu_causal",
        "tokens_per_second",
        "reasons",
    }
    assert old | {"hfu", "tflops_per_gpu", "step_breakdown", "mfu_band"} <= set(p)
    assert (p["tp"], p["pp"], p["zero"], p["micro_batch"], p["dp"]) == (8, 1, 1, 1, 8)
    causes = {
        "compute",
        "recompute",
        "exposed_tp",
        "exposed_dp",
        "exposed_cp_ep",
        "pipeline_bubble",
        "offload",
        "optimizer",
        "stragglers",
    }
    assert set(p["step_breakdown"]) == causes
    assert sum(p["step_breakdown"].values()) == pytest.approx(p["step_seconds"], rel=1e-9)
    low, high = p["mfu_band"]
    assert low < p["mfu"] < high  # the corpus's errors have both signs: the band straddles the prediction
    assert p["tflops_per_gpu"] == pytest.approx(p["mfu"] * 989, rel=1e-6)


def test_plan_cli_json_175b_on_1024_gpus():
    """A list best first with the keys; every plan tiles the 1024 GPUs."""
    proc = distlab("plan", "--model", "175B", "--nodes", "128", "--json", "--top", "4")
    assert proc.returncode == 0, proc.stderr
    plans = json.loads(proc.stdout)
    keys = {"dp", "tp", "pp", "zero", "micro_batch", "memory_bytes_per_gpu", "step_seconds", "mfu", "schedule"}
    assert len(plans) == 4 and all(keys <= set(p) for p in plans)
    assert [p["step_seconds"] for p in plans] == sorted(p["step_seconds"] for p in plans)
    assert all(p["tp"] * p["pp"] * p["dp"] * p["cp"] == 1024 for p in plans)


def test_plan_cli_model_file(tmp_path):
    """A JSON model file with the issue's fields: a 3B Llama-like shape with grouped-query attention."""
    f = tmp_path / "m.json"
    f.write_text(
        json.dumps({"layers": 26, "hidden": 3072, "heads": 24, "kv_heads": 8, "ffn": 8192, "vocab": 32000, "seq": 2048})
    )
    proc = distlab("plan", "--model", str(f), "--task", "finetune", "--json", "--top", "1")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["memory_bytes_per_gpu"] < usable_bytes(H100.gpu)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "175B", "--gpus-per-node", "1"], "nothing fits"),  # even offloaded: 2.8 TB > the 2 TB host
        (["--model", "7B", "--gpu", "Z80"], "unknown GPU"),
        (["--model", "7B", "--global-batch-tokens", "1000"], "not a whole number"),
        (["--model", "7B", "--nodes", "3", "--global-batch-tokens", "65536"], "splits a global batch"),
        (["--model", "12B"], "unknown model preset"),
        (["--model", "7B", "--inter-bw", "0"], "must be positive"),
        (["--model", "70B", "--nodes", "8", "--tp", "3"], "TP"),
        (["--model", "70B", "--nodes", "8", "--tp", "1", "--pp", "1", "--zero", "0", "--offload", "none"], "GB"),
        (["--model", "7B", "--pp", "1", "--schedule", "interleaved", "--virtual", "2"], "interleaved"),
    ],
)
def test_plan_cli_impossible_requests(args, message):
    proc = distlab("plan", *args)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0] and "Traceback" not in proc.stderr, (
        proc.stderr
    )


def test_planner_imports_neither_numpy_nor_torch():
    """A later task runs the planner in the browser (Pyodide: no numpy, no torch): every module of
    distlab.planner that `distlab plan` and the search use, and everything they import, must import neither.
    Would catch a planner module reaching for numpy (the pipeline simulator once did)."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('numpy', 'torch'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import distlab.planner.search, distlab.planner.plan_command, distlab.planner.cost, distlab.planner.comms\n"
        "import distlab.planner.kernels, distlab.planner.rules, distlab.planner.moe, distlab.planner.corpus\n"
        "import distlab.planner.calibration, distlab.planner.config\n"
        "from distlab.planner.config import Training, cluster, model\n"
        "from distlab.planner.search import search\n"
        "search(model('70B'), cluster('H100-SXM', nodes=8), Training(global_batch_tokens=4 * 2**20, seq=4096))\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('numpy', 'torch')]\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def best_of(n, fn):
    """The fewest CPU seconds of n runs: what the code costs, which other processes cannot inflate the way they
    inflate wall time (at load average 20 a 0.5 s search can take seconds of wall time, waiting for a core)."""
    best = float("inf")
    for _ in range(n):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def test_planning_time_benchmarks():
    """The README's benchmarks, with a wide margin (best of 3, three times the target): a full search for 70B on
    64 H100s (target 1 s; 0.45 s on this 2-core machine under load) and Llama 3.1 405B on 16,384 (target 10 s;
    0.1 s). Would catch the search regressing to the exhaustive or numpy-bound planner."""
    from distlab.models.shapes import ModelShape
    from distlab.planner import cost

    llama405 = ModelShape(
        name="Llama 3.1 405B",
        layers=126,
        hidden=16384,
        heads=128,
        kv_heads=8,
        ffn=53248,
        vocab=128256,
        seq=8192,
        mlp="swiglu",
        tie_embeddings=False,
    )
    cases = (
        (preset("70B"), cluster("H100-SXM", nodes=8), Training(global_batch_tokens=4 * 2**20, seq=4096), 3.0),
        (llama405, cluster("H100-SXM", nodes=2048), Training(global_batch_tokens=16 * 2**20, seq=8192), 30.0),
    )
    for m, c, t, bound in cases:

        def run(m=m, c=c, t=t):
            cost.clear_caches()
            search(m, c, t)

        assert best_of(3, run) < bound


def test_gpus_is_the_total_as_in_the_other_commands():
    """`--gpus 64` is 64 GPUs in all (eight nodes of eight), as `distlab memory --gpus` and `distlab mfu --gpus`
    read it. Would catch argparse's prefix matching, which once took it for --gpus-per-node 64 and planned one
    64-GPU H100 node with a 64-GPU NVLink domain."""
    from distlab.core.cli import parser
    from distlab.planner.plan_command import node_layout

    def layout(*argv):
        p = parser("plan", "")
        p.add_argument("--gpus", type=int)
        p.add_argument("--gpus-per-node", type=int)
        p.add_argument("--nodes", type=int)
        return node_layout(p.parse_args(list(argv)))

    assert layout("--gpus", "64") == (8, 8)
    assert layout("--gpus", "64", "--gpus-per-node", "4") == (4, 16)
    assert layout("--gpus", "4") == (4, 1)
    assert layout("--gpus", "16", "--nodes", "2") == (8, 2)
    assert layout() == (8, 1) and layout("--nodes", "3") == (8, 3)
    proc = distlab("plan", "--model", "7B", "--gpus", "16", "--json", "--top", "1")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)[0]
    assert plan["tp"] * plan["pp"] * plan["dp"] * plan.get("cp", 1) == 16
