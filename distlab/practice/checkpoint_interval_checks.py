"""Practice 6's numbers worked by hand: every quantity, the intervals table and its caption against the question's
givens, the model's shape and the formulas typed out here (6ND, D(6N + 12Lhs), MFU = FLOPs / (GPUs x peak x time),
Young's √(2CM), Daly's interval and the exact lost fraction from chapter 10's by-hand module), never taken from the
experiment's own helpers.
"""

from __future__ import annotations

import math
import re

from distlab.core.facts import value
from distlab.core.results import Result
from distlab.practice.checks import pairs_claim, printed_claim, usd
from distlab.throughput.checkpoint_checks import daly, lost, lost_job

DAY_S, HOUR_S = 86400.0, 3600.0
GPUS = 1024  # the question's "1024 H100s"
BATCH_TOKENS = 4 * 2**20  # Llama 2's global batch, 4M tokens (Touvron et al. 2023, section 2.2)
CHECKPOINT_BYTES = 2 + 4 + 4 + 4  # bf16 weights, fp32 master weights, Adam's m and v; gradients are not saved
PCIE5_X16 = 32e9 * 16 * 128 / 130 / 8  # B/s per direction: 32 GT/s x 16 lanes x 128b/130b / 8 bits
LABEL_MINUTES = {"every 10 minutes": 10, "hourly": 60, "every 8 hours": 8 * 60}  # what each row's label says


def claims(r: Result, m, *, restart_s: float, restart_in_memory_s: float) -> None:
    """Every number of practice 6 against its hand-worked value. `m` is the 70B shape; the restarts are the page's
    stated inputs."""
    q = {k: v.value for k, v in r.quantities.items()}
    n, per_token = m.params(), 6 * m.params() + 12 * m.layers * m.hidden * m.seq  # PaLM's count per token
    peak = value("gpus.H100-SXM.bf16_dense_tflops") * 1e12
    d = q["tokens"] * 1e12
    rate = GPUS * peak * q["mfu"]
    row = "interconnect.Llama3-405B-pretraining"
    mtbf = value(f"{row}.days") * DAY_S * value(f"{row}.gpus") / GPUS / value(f"{row}.unexpected_interruptions")
    c, rr, work = q["save"], q["restart"], q["work_days"] * DAY_S
    pairs_claim(
        r,
        "budget by hand: tokens per parameter, 6ND, D(6N + 12Lhs), MFU, days, GPU-hours, dollars",
        {
            "tokens_per_param": (q["tokens_per_param"], d / n),
            "flops": (q["flops"], 6 * n * d),
            "flops_full": (q["flops_full"], d * per_token),
            "attention_factor": (q["attention_factor"], per_token / (6 * n)),
            "mfu": (q["mfu"], BATCH_TOKENS * per_token / (GPUS * peak * q["step"])),
            "step": (q["step"] / q["step_model"], q["mfu_model"] / q["mfu"]),
            "work_days": (q["work_days"], d / BATCH_TOKENS * q["step"] / DAY_S),
            "gpu_hours": (q["gpu_hours"], q["work_days"] * 24 * GPUS),
            "cluster_flops_per_s": (q["cluster_flops_per_s"], GPUS * peak * q["mfu"]),
            "days_6nd": (q["days_6nd"], 6 * n * d / rate / DAY_S),
            "days_full": (q["days_full"], d * per_token / rate / DAY_S),
            "days_band_low": (q["days_band_low"], d * per_token / (GPUS * peak * q["mfu_band_low"]) / DAY_S),
            "usd": (usd(r, "usd"), q["gpu_hours"] * q["price"]),
            "usd_low": (usd(r, "usd_low"), q["gpu_hours"] * q["price_low"]),
            "usd_high": (usd(r, "usd_high"), q["gpu_hours"] * q["price_high"]),
            "sft_tokens": (
                q["sft_tokens"] * 1e6,
                value("scaling_laws.Llama2-SFT.annotations")
                * value("sft_data.llama2-pref-meta.tokens_per_example")
                * value("scaling_laws.Llama2-SFT.epochs"),
            ),
            "sft_gpu_hours": (q["sft_gpu_hours"], q["sft_tokens"] * 1e6 * 6 * n / (peak * q["mfu"]) / HOUR_S),
            "sft_usd": (usd(r, "sft_usd"), q["sft_gpu_hours"] * q["price"]),
        },
        formula="C = 6ND; MFU = batch x (6N + 12Lhs) / (1024 x 989 TFLOP/s x step); GPU-hours = days x 24 x 1024",
    )
    tau_async = max(math.sqrt(2 * q["async_stall"] * mtbf), c)
    pairs_claim(
        r,
        "checkpoint by hand: 14 bytes per parameter, save, MTBF, Young, Daly, time lost, wall days, async, in-memory",
        {
            "state": (q["state"], CHECKPOINT_BYTES * n),
            "checkpoint_bytes_per_param": (q["checkpoint_bytes_per_param"], CHECKPOINT_BYTES),
            "save": (c, CHECKPOINT_BYTES * n / q["storage_bytes_per_s"]),
            "mtbf_h": (q["mtbf_h"], mtbf / HOUR_S),
            "young": (q["young"], math.sqrt(2 * c * mtbf)),
            "daly": (q["daly"], daly(c, mtbf)),
            "lost_daly": (q["lost_daly"], lost(daly(c, mtbf), c, mtbf, rr)),
            "wall_daly": (q["wall_daly"], work / (1 - lost_job(work, daly(c, mtbf), c, mtbf, rr)) / DAY_S),
            **{
                f"{key}": (q[f"lost_{key}"], lost(tau * 60, c, mtbf, rr))
                for key, tau in zip(("minutes", "hourly", "hours"), LABEL_MINUTES.values(), strict=True)
            },
            **{
                f"wall_{key}": (q[f"wall_{key}"], work / (1 - lost_job(work, tau * 60, c, mtbf, rr)) / DAY_S)
                for key, tau in zip(("minutes", "hourly", "hours"), LABEL_MINUTES.values(), strict=True)
            },
            "shard_bytes": (q["shard_bytes"], CHECKPOINT_BYTES * n / GPUS),
            "sync_interval": (q["sync_interval"], math.sqrt(2 * c * mtbf)),
            "sync_stall": (q["sync_stall"], c),
            "sync_lost": (q["sync_lost"], lost(math.sqrt(2 * c * mtbf), c, mtbf, restart_s)),
            "async_stall": (q["async_stall"], CHECKPOINT_BYTES * n / GPUS / PCIE5_X16),
            "async_interval": (q["async_interval"], tau_async),
            "async_lost": (q["async_lost"], lost(tau_async, q["async_stall"], mtbf, restart_s)),
            "memory_interval": (q["memory_interval"], tau_async),
            "memory_stall": (q["memory_stall"], q["async_stall"]),
            "memory_lost": (q["memory_lost"], lost(tau_async, q["async_stall"], mtbf, restart_in_memory_s)),
        },
        formula="Young √(2CM); Daly 2006 eq. (37); lost = 1 − τ / (M e^(R/M) (e^((τ+C)/M) − 1))",
    )
    cells = []
    for label, interval, lost_pct, days in r.tables["intervals"].rows:
        tau = daly(c, mtbf) if label == "Daly" else LABEL_MINUTES[label] * 60
        cells += [(interval, tau / 60), (lost_pct, 100 * lost(tau, c, mtbf, rr))]
        cells.append((days, work / (1 - lost_job(work, tau, c, mtbf, rr)) / DAY_S))
    cap = r.tables["intervals"].caption
    found = re.search(r"on (\d+) H100s, ([\d.]+)T tokens: saves of ([\d.]+) s, MTBF ([\d.]+) h, restarts of (\d+)", cap)
    assert found is not None, cap
    refs = (GPUS, d / 1e12, c, mtbf / HOUR_S, restart_s / 60)
    cells += list(zip(found.groups(), refs, strict=True))
    printed_claim(r, "intervals table and caption: interval, time lost, days, the scenario's numbers", cells)
