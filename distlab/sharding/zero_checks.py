"""Chapter 6's numbers worked by hand: the ZeRO paper's closed forms (Figure 1, K = 12) and ZeRO-Offload's
(Figure 2) typed out here, with every input taken from a second route (the released checkpoints' counts, Llama 2's
printed context length, MLPerf's memory capacity, the Hopper whitepaper's per-link NVLink rate, the QM9700
manual's port rate), never from distlab.sharding.zero or the experiment's own conversions.

Each function compares what the zero-memory experiment put in its Result with these references, as claims.
"""

from __future__ import annotations

import math
import re

from distlab.core.facts import value
from distlab.core.results import Result, worst_relative_gap

# Llama 2 70B's released config.json (meta-llama/Llama-2-70b-hf): hidden_size, num_attention_heads,
# num_key_value_heads, intermediate_size, num_hidden_layers; SwiGLU, RMSNorm, no dropout
LLAMA2_70B = {"hidden": 8192, "heads": 64, "kv": 8, "ffn": 28672, "layers": 80}

# Touvron et al. 2023, "Llama 2" (https://arxiv.org/abs/2307.09288), Table 1's caption, verbatim.
LLAMA2_BATCH_QUOTE = "All models are trained with a global batch-size of 4M tokens."


def ceil_div(a: int, b: int) -> int:
    """⌈a/b⌉ written as floor plus a remainder test (zero.shard_elements negates a floor division)."""
    return a // b + (a % b > 0)


def closed_form(p: int, n: int, zero: int, *, opt_host: bool = False, params_host: bool = False) -> dict[str, int]:
    """Device and host bytes per GPU: ZeRO's (2 + 2 + 12) split, sharded states holding ⌈Ψ/N⌉ elements; with the
    optimizer offloaded, its shard and the rank's bf16 gradient shard live on the host (ZeRO-Offload, Figure 2)."""
    s = ceil_div(p, n)
    params = 2 * (s if zero == 3 else p)
    grads = 2 * (s if zero >= 2 else p)
    opt = 12 * (s if zero >= 1 else p)
    host = 0
    if opt_host:
        host, opt = opt + 2 * s, 0
        if zero >= 2:
            grads = 0
    if params_host:
        host, params = host + params, 0
    return {"params": params, "grads": grads, "optimizer": opt, "total": params + grads + opt, "host": host}


def hbm_bytes() -> float:
    """H100 SXM's memory from MLPerf's system description, a second source beside the datasheet."""
    return value("gpus.H100-SXM.mlperf_memory_gb") * 1e9


def ndr_bytes_per_s() -> float:
    """One NDR port per direction from NVIDIA's QM9700 manual (not the IBTA roadmap interconnect.toml quotes)."""
    return value("cluster_fabric.qm9700.gbits_per_s_per_port") * 1e9 / 8


def nvlink_bytes_per_s() -> float:
    """NVLink 4 per direction: 18 links x 25 GB/s each way (Hopper whitepaper), not the datasheet's 900 GB/s / 2."""
    return (
        value("interconnect.NVLink4-H100.links")
        * value("interconnect.NVLink4-H100.gbytes_per_s_per_link_per_direction")
        * 1e9
    )


def llama2_70b_sequence_bytes(seq: int, micro: int) -> int:
    """One micro-batch's activations, all 70B layers, FlashAttention, no recomputation: appendix 03's hand-collected
    expression (Korthikanti et al.'s parts adapted to SwiGLU, RMSNorm and GQA, written apart from
    distlab.memory.layer_activations) at the config's shape typed above, times the layers."""
    from types import SimpleNamespace

    from distlab.memory.activation_closed_form import expected

    shape = {k: v for k, v in LLAMA2_70B.items() if k != "layers"}
    m = SimpleNamespace(**shape, experts=0, norm_kind="rmsnorm", trains_with_dropout=False, mlp="swiglu")
    return LLAMA2_70B["layers"] * expected(m, seq, micro, "flash")


def figure_claim(r: Result, ax, p: int, labels: dict[int, str]) -> None:
    """The per-GPU figure's drawn points and memory line, read back, against the closed forms."""
    pairs = []
    for line in ax.get_lines():
        z = next((k for k, v in labels.items() if v == line.get_label()), None)
        xs, ys = line.get_xdata(), line.get_ydata()
        if z is None:  # the GPU's memory, drawn as a horizontal line in GB
            pairs += [(y * 1e9, hbm_bytes()) for y in ys]
        else:
            pairs += [(y * 1e9, closed_form(p, int(x), z)["total"]) for x, y in zip(xs, ys)]
    r.claim("per-GPU figure: drawn points = closed forms (largest gap)", worst_relative_gap(pairs), 0.0, abs_tol=1e-12)


def by_hand(r: Result, *, micro: int, big_gpus: int, accum: int, hide_mfu: float, large_gpus: int) -> None:
    """Every number zero-memory shows, against the closed forms and the second routes above."""
    from distlab.models.published import llama2_context
    from distlab.models.shapes import published_params

    q = {k: v.value for k, v in r.quantities.items()}
    p7, p70 = published_params("7B"), published_params("70B")
    assert p7 is not None and p70 is not None
    n, hbm = int(q["gpus"]), hbm_bytes()
    r.claim(
        "7B and 70B in billions = checkpoints' counts / 10^9 (largest gap)",
        worst_relative_gap([(q["params_billions"], p7 / 1e9), (q["70b_params_billions"], p70 / 1e9)]),
        0.0,
        abs_tol=1e-12,
    )
    # the 7B table, cell by cell (and its "fits" column against MLPerf's capacity)
    configs = [(0, False, False), (1, False, False), (2, False, False), (3, False, False)]
    configs += [(1, True, False), (2, True, False), (3, True, False), (3, True, True)]
    wrong = 0
    for row, (z, oo, op) in zip(r.tables["seven_b"].rows, configs, strict=True):
        ref = closed_form(p7, n, z, opt_host=oo, params_host=op)
        cells = [c.value for c in row[1:6]]
        wrong += cells != [ref[k] for k in ("params", "grads", "optimizer", "total", "host")]
        wrong += row[6] != ("yes" if ref["total"] < hbm else "no")
    r.claim("7B table: cells differing from ZeRO / ZeRO-Offload closed forms", wrong, 0, unit="cells")
    # 70B on big_gpus
    big = [(q[f"70b_z{z}_bytes"], closed_form(p70, big_gpus, z)["total"]) for z in (1, 2, 3)]
    r.claim("70B, ZeRO-1/2/3 per GPU = closed forms (largest gap)", worst_relative_gap(big), 0.0, abs_tol=1e-12)
    r.claim("fewest GPUs holding 70B's 16Ψ = ⌈16Ψ / HBM⌉", q["70b_z3_min_gpus"], math.ceil(16 * p70 / hbm))
    # traffic times and compute
    s7 = ceil_div(p7, n)
    phase = (n - 1) * s7 * 2  # bytes of one bf16 ring phase
    links = {"nvlink": nvlink_bytes_per_s(), "ndr": ndr_bytes_per_s()}
    times = [(q[f"{k}_bytes_per_s"], bw) for k, bw in links.items()]
    times += [(q[f"{k}_z{z}_s"], {0: 2, 3: 3}[z] * phase / bw) for k, bw in links.items() for z in (0, 3)]
    r.claim(
        "link rates, 7B's seconds of traffic = (2 or 3)(N-1)⌈Ψ/N⌉b / B (largest gap)",
        worst_relative_gap(times),
        0.0,
        abs_tol=1e-12,
    )
    peak = value("gpus.H100-SXM.bf16_dense_tflops") * 1e12
    # the traffic table: all-reduce, reduce-scatter, all-gather, sent, and the N -> ∞ volume (2Ψb, 2Ψb, 2Ψb, 3Ψb)
    phases = {0: (2, 0, 0), 1: (0, 1, 1), 2: (0, 1, 1), 3: (0, 1, 2)}
    cells = []
    for row, z in zip(r.tables["traffic"].rows, phases, strict=True):
        ar, rs, ag = phases[z]
        ref = [ar * phase, rs * phase, ag * phase, (ar + rs + ag) * phase, (ar + rs + ag) * p7 * 2]
        cells += list(zip([c.value for c in row[1:6]], ref, strict=True))
    r.claim("traffic table = ring phases x (N-1)⌈Ψ/N⌉b (largest gap)", worst_relative_gap(cells), 0.0, abs_tol=1e-12)
    r.claim("worked compute = 6ΨT / peak", q["worked_compute_s"], 6 * p7 * q["worked_tokens"] / peak, rel_tol=1e-12)
    r.claim("(N-1)/N = DDP's ring bytes / 2Ψb", q["factor"], 2 * phase / (2 * p7 * 2), rel_tol=1e-12, unit="")
    accum = [(q["z2_accum_over_ddp"], (accum + 1) / 2), (q["z3_accum_over_ddp"], 3 * accum / 2)]
    r.claim("accumulation / DDP = (m+1)/2, 3m/2 (largest gap)", worst_relative_gap(accum), 0.0, abs_tol=1e-12)
    # why not ZeRO-3 alone for 70B
    seq, s70 = llama2_context(), ceil_div(p70, big_gpus)
    comm = 3 * (big_gpus - 1) * s70 * 2 / ndr_bytes_per_s()
    compute = 6 * p70 * seq / (peak * hide_mfu)
    hide = math.ceil(comm / compute)
    exact = [
        (q["70b_z3_micro_s"], comm),
        (q["70b_seq_compute_s"], compute),
        (q["70b_hide_seqs"], hide),
        (q["70b_z3_free_bytes"], hbm - 16 * s70),
        (q["70b_hide_batch_tokens"], big_gpus * hide * micro * seq),
        (q["large_dp_batch_tokens"], large_gpus * micro * seq),
    ]
    r.claim(
        "70B ZeRO-3 problem: seconds, sequences, bytes, tokens by hand (largest gap)",
        worst_relative_gap(exact),
        0.0,
        abs_tol=1e-12,
    )
    batch = re.search(r"batch-size of (\d+)M tokens", LLAMA2_BATCH_QUOTE)
    assert batch is not None
    r.claim(
        "Llama 2's global batch = Table 1's caption (4M tokens)",
        value("scaling_laws.Llama2-70B.batch_tokens_million"),
        int(batch.group(1)),
        unit="M tokens",
    )
    r.claim(
        "70B sequence, no recompute = 80 x appendix 03's Llama layer",
        q["70b_seq_act_bytes"],
        llama2_70b_sequence_bytes(seq, micro),
        unit="B",
    )
    layer_input = 80 * 2 * seq * 8192  # 80 layers' bf16 inputs of width 8192 (Llama 2 70B, Table 1 and config)
    r.claim(
        "hiding micro-batch's activations, full recompute ≈ hide x 2sbh x layers",
        q["70b_hide_act_full_bytes"],
        hide * micro * layer_input,
        rel_tol=0.01,
        unit="B",
    )
