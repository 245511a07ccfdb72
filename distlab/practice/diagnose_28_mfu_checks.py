"""Practice 5's numbers worked by hand: the dashboard's throughput and the MFU recomputed four ways (6N, 6N + 12Lhs,
the with-sparsity peak, HFU's 8N + 16Lhs), the step's shares, the known losses as factors (one loader worker, 2 %
jitter over 32 GPUs with E[max of 32 normals] integrated here, saves and failures by chapter 10's by-hand module),
the residual, padding, the dtype ceilings from the datasheet, headroom, and the triage table's printed numbers,
all typed out here, never taken from the experiment's helpers.

The planner's step, MFU and memory and the other chapters' models (NCCL's algorithm time, the NIC path rates, the
kernel counts per layer) enter as inputs: their own chapters guard them.
"""

from __future__ import annotations

import math
import re

from distlab.core.facts import value
from distlab.core.results import Result
from distlab.practice.checks import pairs_claim, printed_claim
from distlab.throughput.checkpoint_checks import daly, lost

# Llama 2 13B (its config.json): 40 layers, hidden 5120, SwiGLU 13824, vocabulary 32000, untied; sequence 4096
H, FFN, LAYERS, VOCAB, SEQ = 5120, 13824, 40, 32000, 4096
PARAMS_13B = LAYERS * (4 * H * H + 3 * H * FFN + 2 * H) + 2 * VOCAB * H + H  # 13,015,864,320
GPUS = 4 * 8  # the question's 32 GPUs: 4 nodes of 8 H100s
CHECKPOINT_BYTES = 2 + 4 + 4 + 4  # bf16 weights, fp32 master weights, Adam's m and v
DAY_S, HOUR_S = 86400.0, 3600.0
JITTER = 0.02  # chapter 10's per-GPU step-time jitter (distlab/throughput/stragglers.py's stated assumption)


def expected_max_normal(n: int) -> float:
    """E[max of n iid N(0, 1)] = ∫ z n φ(z) Φ(z)^(n-1) dz, Simpson's rule on [-12, 12] in pure Python."""
    steps, lo, hi = 4800, -12.0, 12.0
    h = (hi - lo) / steps
    f = lambda z: z * n * math.exp(-z * z / 2) / math.sqrt(2 * math.pi) * (0.5 * (1 + math.erf(z / 2**0.5))) ** (n - 1)
    odd = sum(f(lo + (2 * i - 1) * h) for i in range(1, steps // 2 + 1))
    even = sum(f(lo + 2 * i * h) for i in range(1, steps // 2))
    return h / 3 * (f(lo) + 4 * odd + 2 * even + f(hi))


def _numbers(text: str) -> list[str]:
    """The numbers printed in a sentence, in order ('7.1-9.9 s' gives '7.1', '9.9')."""
    return re.findall(r"(?<![\w.])\d[\d,]*(?:\.\d+)?", text)  # not the 32 of "tf32"


def _cells(text: str, refs) -> list[tuple[str, float]]:
    """(printed, by hand) pairs of a sentence's numbers in order; a sentence with more or fewer numbers than its
    references gets one pair that cannot pass (a number printed as '2e+18' reads as two)."""
    nums = _numbers(text)
    return list(zip(nums, refs)) if len(nums) == len(refs) else [("0", 1e300)]


def claims(r: Result, inputs: dict) -> None:
    """Every number practice 5 computes itself. `inputs` holds the scenario (the page's stated inputs: observed MFU,
    loader, saves, restart, throttled clock, alarm share, the team's plan) and the other chapters' models at this
    job (launch kernels per layer, the launch cost, NCCL's 1 GiB all-reduce times, the NIC path rates, the usable
    memory)."""
    q = {k: v.value for k, v in r.quantities.items()}
    i = inputs
    n, attn = PARAMS_13B, 12 * LAYERS * H * SEQ
    peak = value("gpus.H100-SXM.bf16_dense_tflops") * 1e12
    tokens_per_s = i["observed"] * GPUS * peak / (6 * n)
    mfu_full = tokens_per_s * (6 * n + attn) / (GPUS * peak)
    row = "interconnect.Llama3-405B-pretraining"
    mtbf = value(f"{row}.days") * DAY_S * value(f"{row}.gpus") / GPUS / value(f"{row}.unexpected_interruptions")
    save = CHECKPOINT_BYTES * n / i["save_bytes_per_s"]
    ckpt = 1 - lost(i["save_every_s"], save, mtbf, i["restart_s"])
    strag = 1 / (1 + JITTER * expected_max_normal(GPUS))
    fast = q["plan_step_s"] * q["plan_mfu_model"] / q["plan_mfu_high"]
    slow = q["plan_step_s"] * q["plan_mfu_model"] / q["plan_mfu_low"]
    load = i["loader_seconds"] / i["loader_workers"]  # chapter 10: the step is max(C, L / w)
    input_fast, input_slow = fast / max(fast, load), slow / max(slow, load)
    expected_high = q["plan_mfu_high"] * input_fast * strag * ckpt
    expected_low = q["plan_mfu_low"] * input_slow * strag * ckpt
    tp, pp, b = i["team_plan"]["tp"], i["team_plan"]["pp"], i["team_plan"]["micro_batch"]
    per_token_gpu = (6 * n + attn) / (tp * pp)
    kernels = i["kernels_per_layer"] * LAYERS / pp
    t_star = kernels * i["launch_s"] * peak * i["assumed_mfu"] / per_token_gpu
    mean = value("sft_data.llama2-pref-meta.tokens_per_example")  # Llama 2's Meta preference dialogues
    busbw = {k: 2**30 / t * 2 * (ranks - 1) / ranks for k, (t, ranks) in i["allreduce_1gib"].items()}
    pairs = {
        "tokens_per_s": (q["tokens_per_s"], tokens_per_s),
        "mfu_full": (q["mfu_full"], mfu_full),
        "mfu_sparse_peak": (q["mfu_sparse_peak"], mfu_full * peak / (value("gpus.H100-SXM.bf16_sparse_tflops") * 1e12)),
        "hfu_recompute": (q["hfu_recompute"], tokens_per_s * (8 * n + 16 * LAYERS * H * SEQ) / (GPUS * peak)),
        "throttled_mfu_factor": (q["throttled_mfu_factor"], i["throttled_clock"]),
        "jitter_32_factor": (q["jitter_32_factor"], strag),
        "factor_stragglers": (q["factor_stragglers"], strag),
        "busbw_node": (q["busbw_node"], busbw["node"]),
        "busbw_cluster": (q["busbw_cluster"], busbw["cluster"]),
        "busbw_node_alarm": (q["busbw_node_alarm"], i["busbw_alarm"] * busbw["node"]),
        "busbw_cluster_alarm": (q["busbw_cluster_alarm"], i["busbw_alarm"] * busbw["cluster"]),
        "far_nic_fraction": (q["far_nic_fraction"], i["nic_sys"] / i["nic_pix"]),
        "launch_bound_tokens": (q["launch_bound_tokens"], t_star),
        "micro_batch_tokens": (q["micro_batch_tokens"], b * SEQ),
        "step_fast_s": (q["step_fast_s"], fast),
        "step_slow_s": (q["step_slow_s"], slow),
        "factor_input_fast": (q["factor_input_fast"], input_fast),
        "factor_input_slow": (q["factor_input_slow"], input_slow),
        "loader_wait": (q["loader_wait"], 1 - input_fast),
        "factor_checkpoints": (q["factor_checkpoints"], ckpt),
        "save_s": (q["save_s"], save),
        "mtbf_h": (q["mtbf_h"], mtbf / HOUR_S),
        "ckpt_lost": (q["ckpt_lost"], 1 - ckpt),
        "daly_s": (q["daly_s"], daly(save, mtbf)),
        "expected_low": (q["expected_low"], min(expected_low, expected_high)),
        "expected_high": (q["expected_high"], max(expected_low, expected_high)),
        "residual": (q["residual"], mfu_full / max(expected_low, expected_high)),
        "pad_mean_tokens": (q["pad_mean_tokens"], mean),
        "pad_real_share": (q["pad_real_share"], mean / SEQ),
        "pad_mfu_if_padded": (q["pad_mfu_if_padded"], mfu_full * mean / SEQ),
        "tf32_ceiling": (q["tf32_ceiling"], value("gpus.H100-SXM.tf32_dense_tflops") * 1e12 / peak),
        "fp32_ceiling": (q["fp32_ceiling"], value("gpus.H100-SXM.fp32_tflops") * 1e12 / peak),
        "team_headroom": (q["team_headroom"], 1 - q["team_memory_bytes"] / i["usable"]),
        "best_headroom": (q["best_headroom"], 1 - q["best_memory_bytes"] / i["usable"]),
        "wb_attention_factor": (q["wb_attention_factor"], 1 + attn / (6 * n)),
        "wb_recompute_factor": (q["wb_recompute_factor"], 6 / 8),
        "jitter": (q["jitter"], JITTER),
    }
    for row_ in r.tables["profile"].rows:  # each span's share of the planner's step
        key = row_[0].split()[0].replace("-", "_")
        pairs[f"profile_{key}_share"] = (q[f"profile_{key}_share"], row_[1].value / q["plan_step_s"])
    pairs_claim(
        r,
        "28 % triaged by hand: the MFU four ways, busbw, launch-bound size, the known losses, residual, ceilings",
        pairs,
        formula="tokens/s = 0.28 x 32 x peak / 6N; MFU = tokens/s x (6N + 12Lhs) / (32 peak); busbw = algbw x 2(n-1)/n",
    )
    arithmetic = [
        100 * i["observed"],
        100 * mfu_full,
        100 * pairs["mfu_sparse_peak"][1],
        100 * pairs["hfu_recompute"][1],
    ]
    cells = [(row_[1], v) for row_, v in zip(r.tables["arithmetic"].rows, arithmetic, strict=True)]
    cells += _cells(r.tables["arithmetic"].caption, (tokens_per_s, GPUS))
    cells += [(row_[2], 100 * row_[1].value / q["plan_step_s"]) for row_ in r.tables["profile"].rows]
    triage = {row_[0].split(".")[0]: row_[3] for row_ in r.tables["triage"].rows}
    refs = {
        "2": (100 * i["throttled_clock"], GPUS, 100 * i["throttled_clock"]),
        "3": (8, 4, busbw["node"] / 1e9, GPUS, 4, 8, busbw["cluster"] / 1e9),  # 8 H100 .. NVLink 4 .. 4 nodes (8 x
        "5": (100 * i["nic_sys"] / i["nic_pix"],),
        "6": (t_star, b * SEQ),
        "7": (i["loader_workers"], i["loader_seconds"], fast, slow, 100 * (1 - input_fast)),
        "8": (100 * JITTER, GPUS, 100 * (1 - strag)),
        "9": (100 * (1 - ckpt), daly(save, mtbf) / HOUR_S),
        "10": (mean, SEQ, 100 * mean / SEQ),
        "11": (100 * pairs["tf32_ceiling"][1], 100 * pairs["fp32_ceiling"][1]),
        "12": (q["team_memory_bytes"] / 1e9, i["usable"] / 1e9),
    }
    for step, ref in refs.items():
        cells += _cells(triage[step], ref)
    confirms = {row_[0].split(".")[0]: row_[2] for row_ in r.tables["triage"].rows}
    cells += _cells(confirms["3"], (1, 100 * i["busbw_alarm"]))  # "busbw at 1 GiB below 80 %"
    p = i["team_plan"]
    plan = (
        p["tp"],
        p["pp"],
        p["dp"],
        p["zero"],
        p["micro_batch"],
        p["microbatches"],
    )  # "TP 4 x PP 2 x DP 4, ZeRO-1, ..."
    job = (2, 13, GPUS // 8, 8)  # "Llama 2 13B, 4 nodes x 8 H100-SXM"
    scenario = [row_[1] for row_ in r.tables["scenario"].rows]
    scenario_refs = [
        job,
        (p["dp"] * p["micro_batch"] * p["microbatches"], SEQ),  # every replica's micro-batches: the global batch
        plan,
        (i["loader_workers"], i["loader_seconds"]),
        (i["save_every_s"] / 60, i["save_bytes_per_s"] / 1e9),
        (3, i["restart_s"] / 60),  # "Llama 3's rate per GPU, restarts of 10 min"
    ]
    for text, ref in zip(scenario, scenario_refs, strict=True):
        cells += _cells(text, ref)
    cells += _cells(r.tables["triage"].caption, job + plan)
    printed_claim(r, "arithmetic, profile, triage and scenario tables by hand: every number they print", cells)
    r.claim(
        "the allocator's verdict: 'not near the limit' exactly when a fifth or more of usable memory is free",
        int("not near the limit" in triage["12"]),
        int(q["team_memory_bytes"] < 0.8 * i["usable"]),
    )
