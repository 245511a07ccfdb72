"""Practice 6: a 70B budget and its checkpoint interval (experiment practice-checkpoint)."""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.facts import value
from distlab.core.results import Result
from distlab.memory.model_states import add_state_bytes, checkpoint_bytes_per_param
from distlab.planner.config import Training, cluster
from distlab.planner.cost_checks import check_step_causes
from distlab.planner.planner_validation import claim_band, h100_optimism
from distlab.planner.search import search
from distlab.planner.worked_plan_7b import ddp_bucket_bytes_of_torch
from distlab.practice import checkpoint_interval_checks

# ---------------------------------------------------------------- practice (f): checkpoint interval of a 70B run
RESTART_70B_S = 900.0  # reschedule 128 nodes, load the checkpoint, warm up (an input)
STORAGE_BYTES_PER_S = 100e9  # aggregate write rate of the cluster's parallel file system (an input, shown on the page)
RESTART_IN_MEMORY_S = 300.0  # restart from a copy in the peers' host memory: reschedule and warm up, no storage read
HOST_LINK = "PCIe5-x16"  # an H100's link to host memory, the async save's only stall


@experiment(
    "practice-checkpoint",
    "practice: budget a compute-optimal 70B run on 1024 H100s and choose its checkpoint interval",
    kind="computed",
)
def practice_checkpoint(device: str) -> Result:
    from distlab.gpu.flops import flops_per_token
    from distlab.planner.calibration import mfu_band
    from distlab.planner.config import model
    from distlab.planner.search import PRETRAIN_BATCH_TOKENS
    from distlab.scaling_laws import optimal_tokens_for, sft_budget, training_flops
    from distlab.throughput.gpu_cost import add_usd, dollars, price
    from distlab.throughput.young_daly import (
        daly_seconds,
        expected_wall_seconds,
        first_order_optimal_seconds,
        llama3_mtbf_seconds,
        lost_fraction,
        optimal_seconds,
        young_seconds,
    )

    r = Result("practice-checkpoint", kind="computed")
    m = model("70B")
    c = cluster("H100-SXM", nodes=128)
    t = Training(global_batch_tokens=PRETRAIN_BATCH_TOKENS, seq=m.seq)
    ranked = search(m, c, t)
    best = ranked[0]
    check_step_causes(r, [(e, m, c, t, "70B") for e in ranked[:3]], ddp_bucket_bytes_of_torch())
    ratio = h100_optimism()
    tokens = optimal_tokens_for(m.params())
    steps = tokens / t.global_batch_tokens
    step_s = best.step_seconds * ratio
    work = steps * step_s
    r.add("tokens", tokens / 1e12, "trillion tokens", "compute-optimal tokens for 70B (Table 3's rule)")
    r.add("flops", training_flops(m.params(), tokens), "FLOP", "6ND")
    r.add("step_model", best.step_seconds, "s", "the planner's step")
    r.add("step", step_s, "s", "the step divided by the H100 optimism")
    r.add("mfu", best.time.mfu / ratio, "fraction", "expected MFU")
    r.add("work_days", work / 86400, "days", "compute time without failures")
    r.add("gpu_hours", work * c.gpus / 3600, "GPU-hours", "GPU-hours")
    low, high = mfu_band(best.time.mfu)
    r.add("mfu_model", best.time.mfu, "fraction", "the planner's MFU for its best plan")
    r.add("mfu_band_low", low, "fraction", "what published runs predicted at that MFU reached: low")
    r.add("mfu_band_high", high, "fraction", "... high")
    per_token = flops_per_token(m.params(), m.layers, m.hidden, t.seq)
    r.claim(
        "GPU-hours = tokens x FLOPs per token / (peak x MFU)",
        work * c.gpus / 3600,
        tokens * per_token / (c.gpu.peak_flops("bf16") * best.time.mfu / ratio) / 3600,
        rel_tol=1e-9,
    )
    state = checkpoint_bytes_per_param() * m.params()
    add_state_bytes(r)  # the page's 14 bytes per parameter, claimed
    save = state / STORAGE_BYTES_PER_S
    mtbf = llama3_mtbf_seconds() * value("interconnect.Llama3-405B-pretraining.gpus") / c.gpus
    r.add("state", state, "B", "checkpoint: bf16 weights + fp32 master, m, v")
    r.add("save", save, "s", "one save at the storage's rate")
    r.add("mtbf_h", mtbf / 3600, "h", "MTBF of 1024 GPUs at Llama 3's failure rate per GPU")
    unexpected = value("interconnect.Llama3-405B-pretraining.unexpected_interruptions")
    r.add("interruptions", unexpected, "interruptions", "Llama 3 405B's unexpected interruptions in 54 days")
    r.claim(
        "MTBF of 1024 GPUs = 54 days x 16,384 / 1024 GPUs / the interruptions",
        mtbf / 3600,
        value("interconnect.Llama3-405B-pretraining.days")
        * 24
        * value("interconnect.Llama3-405B-pretraining.gpus")
        / c.gpus
        / unexpected,
        rel_tol=1e-9,
        unit="h",
    )
    r.add("restart", RESTART_70B_S, "s", "restart time (input)")
    young, daly, exact = young_seconds(save, mtbf), daly_seconds(save, mtbf), optimal_seconds(save, mtbf)
    r.add("young", young, "s", "Young: sqrt(2CM)")
    r.add("daly", daly, "s", "Daly's interval")
    r.claim(
        "Young's √(2CM) = the numerical minimiser of the first-order overhead",
        young,
        first_order_optimal_seconds(save, mtbf),
        rel_tol=1e-6,
        unit="s",
    )
    r.claim("Daly's interval is the exact optimum to 2 %", daly, exact, rel_tol=0.02, unit="s")
    rows = []
    for label, tau in (("Daly", daly), ("every 10 minutes", 600.0), ("hourly", 3600.0), ("every 8 hours", 28800.0)):
        lost = lost_fraction(tau, save, mtbf, RESTART_70B_S)
        wall = expected_wall_seconds(work, tau, save, mtbf, RESTART_70B_S)
        rows.append([label, f"{tau / 60:.1f} min", f"{lost:.2%}", f"{wall / 86400:.1f}"])
        key = label.split()[-1].lower()
        r.add(f"lost_{key}", lost, "fraction", f"time lost, {label}")
        r.add(f"wall_{key}", wall / 86400, "days", f"expected wall-clock days, {label}")
    r.table(
        "intervals",
        ["checkpoint", "interval", "time lost", "expected days"],
        rows,
        caption=f"{m.name} on {c.gpus} H100s, {tokens / 1e12:.2f}T tokens: saves of {save:.0f} s, MTBF "
        f"{mtbf / 3600:.1f} h, restarts of {RESTART_70B_S / 60:.0f} min",
    )
    _dollars(r, m, c, work * c.gpus / 3600, best.time.mfu / ratio, per_token, (price, dollars, add_usd, sft_budget))
    r.claim(
        "Daly's interval loses less than hourly saves",
        r.quantities["lost_daly"].value,
        r.quantities["lost_hourly"].value,
        relation="<=",
        unit="fraction",
    )
    r.claim(
        "Daly's interval loses less than saving every 8 hours",
        r.quantities["lost_daly"].value,
        r.quantities["lost_hours"].value,
        relation="<=",
        unit="fraction",
    )
    claim_band(r)  # the MFU bands this page quotes
    _whiteboard(r, m, c, tokens, per_token, best.time.mfu / ratio)
    _async_and_in_memory(r, state, c.gpus, mtbf, save)
    checkpoint_interval_checks.claims(r, m, restart_s=RESTART_70B_S, restart_in_memory_s=RESTART_IN_MEMORY_S)
    return r


def _whiteboard(r: Result, m, c, tokens: float, per_token: float, mfu: float) -> None:
    """Both FLOP counts and the days each gives: 6ND (Chinchilla's C) and D(6N + 12Lhs), which the page's days use
    (the MFU is defined with the attention term, so the two must match)."""
    n = m.params()
    rate = c.gpus * c.gpu.peak_flops("bf16") * mfu
    six_nd = 6 * n * tokens
    full = per_token * tokens
    r.add("tokens_per_param", tokens / n, "tokens/param", "compute-optimal tokens per parameter")
    r.add("storage_bytes_per_s", STORAGE_BYTES_PER_S, "B/s", "input: the file system's aggregate write rate")
    r.add("flops_full", full, "FLOP", "D (6N + 12Lhs): the FLOPs the MFU counts")
    r.add("attention_factor", full / six_nd, "", "(6N + 12Lhs) / 6N for 70B at its sequence")
    r.add("cluster_flops_per_s", rate, "FLOP/s", "1024 GPUs x bf16 peak x expected MFU")
    r.add("days_6nd", six_nd / rate / 86400, "days", "6ND at that rate")
    r.add("days_full", full / rate / 86400, "days", "D (6N + 12Lhs) at that rate")
    low = r.quantities["mfu_band_low"].value
    r.add("days_band_low", full / (c.gpus * c.gpu.peak_flops("bf16") * low) / 86400, "days", "at the band's low MFU")
    r.claim(
        "budgeting at the band's low MFU takes longer than the expected days",
        r.quantities["days_band_low"].value,
        r.quantities["days_full"].value,
        relation=">=",
        unit="days",
    )
    r.claim(
        "the page's days = D (6N + 12Lhs) / (GPUs x peak x MFU), not 6ND",
        r.quantities["work_days"].value,
        tokens * (6 * n + 12 * m.layers * m.hidden * m.seq) / (c.gpus * c.gpu.peak_flops("bf16") * mfu) / 86400,
        rel_tol=1e-6,
        unit="days",
        formula="PaLM's Appendix B count per token, written out",
    )


def _async_and_in_memory(r: Result, state: float, gpus: int, mtbf: float, save: float) -> None:
    """Young's formula with the two levers: an asynchronous save stalls training only for the copy of each GPU's
    shard to host memory (the write to storage runs behind the next steps, so the interval may not be shorter than
    the write); an in-memory checkpoint on peers' host memory also shortens the restart (no storage read)."""
    from distlab.hardware.links import per_direction_bytes_per_s
    from distlab.throughput.young_daly import lost_fraction, young_seconds

    stall = state / gpus / per_direction_bytes_per_s(HOST_LINK)  # every GPU copies its shard at once
    tau_async = max(young_seconds(stall, mtbf), save)  # a new save cannot start before the last one is written
    cases = {
        "sync": (young_seconds(save, mtbf), save, RESTART_70B_S),
        "async": (tau_async, stall, RESTART_70B_S),
        "memory": (tau_async, stall, RESTART_IN_MEMORY_S),
    }
    for key, (tau, c_s, restart) in cases.items():
        r.add(f"{key}_interval", tau, "s", f"{key}: Young's interval")
        r.add(f"{key}_stall", c_s, "s", f"{key}: seconds training stops per save")
        r.add(f"{key}_lost", lost_fraction(tau, c_s, mtbf, restart), "fraction", f"{key}: time lost")
    r.add("restart_in_memory", RESTART_IN_MEMORY_S, "s", "input: restart from peers' host memory")
    r.add("shard_bytes", state / gpus, "B", "one GPU's share of the checkpoint")
    r.claim(
        "an async save stalls for its shard over PCIe: state / GPUs / 64 GB/s (PCIe 5 x16 per direction)",
        stall,
        state / gpus / (32e9 * 16 * 128 / 130 / 8),
        rel_tol=1e-9,
        unit="s",
        formula="32 GT/s x 16 lanes x 128b/130b / 8 bits",
    )
    r.claim(
        "the levers only help: async loses less than synchronous saves, in-memory restarts less than async",
        r.quantities["memory_lost"].value,
        r.quantities["async_lost"].value,
        relation="<=",
        unit="fraction",
    )
    r.claim(
        "... async loses less than synchronous saves",
        r.quantities["async_lost"].value,
        r.quantities["sync_lost"].value,
        relation="<=",
        unit="fraction",
    )
    r.claim(
        "with async saves what is left is mostly the restart: loss within 25 % of R/M",
        r.quantities["async_lost"].value,
        RESTART_70B_S / mtbf,
        rel_tol=0.25,
        unit="fraction",
    )
    r.claim(
        "the first-order loss at Young's interval is about sqrt(2C/M) + R/M",
        r.quantities["sync_lost"].value,
        (2 * save / mtbf) ** 0.5 + RESTART_70B_S / mtbf,
        rel_tol=0.05,
        unit="fraction",
    )


def _dollars(r: Result, m, c, gpu_hours: float, mfu: float, per_token: float, fns) -> None:
    """What the run and a Llama 2-Chat-style fine-tune of the same model cost, at the dated list's median H100 price."""
    price, dollars, add_usd, sft_budget = fns
    p = price(c.gpu.name)
    run = dollars(gpu_hours, p)
    r.add("price", p.usd_per_gpu_hour, "USD/GPU-hour", f"median {c.gpu.name} on-demand list price")
    r.add("price_low", p.low, "USD/GPU-hour", "lowest on the list")
    r.add("price_high", p.high, "USD/GPU-hour", "highest on the list")
    r.data["price_dates"] = f"{p.first_date} to {p.last_date}"
    add_usd(r, "usd", run, "the run: GPU-hours x median price")
    add_usd(r, "usd_low", gpu_hours * p.low, "at the list's lowest price")
    add_usd(r, "usd_high", gpu_hours * p.high, "at the list's highest price")
    sft = sft_budget(m.params(), gpu_name=c.gpu.name, mfu=mfu)
    r.add("sft_tokens", sft["tokens"] / 1e6, "million tokens", "Llama 2-Chat's SFT data for this model")
    r.add("sft_gpu_hours", sft["gpu_hours"], "GPU-hours", "its H100 GPU-hours at the run's MFU")
    add_usd(r, "sft_usd", sft["usd"], "its cost at the median price")
    r.claim(
        "the fine-tune costs its FLOP share of the run (same GPU, MFU and price)",
        sft["usd"] / run,
        sft["tokens"] * 6 * m.params() / (r.quantities["tokens"].value * 1e12 * per_token),
        rel_tol=1e-6,
        formula="6N per fine-tune token (sft_budget) against 6N + 12Lhs per pretraining token",
    )
    r.claim("the median price lies within the list's range", p.usd_per_gpu_hour, p.high, relation="<=")
