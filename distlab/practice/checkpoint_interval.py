"""Practice 6: a 70B budget and its checkpoint interval (experiment practice-checkpoint)."""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.facts import value
from distlab.core.results import Result
from distlab.planner.config import Training, cluster
from distlab.planner.planner_validation import h100_optimism
from distlab.planner.search import search

# ---------------------------------------------------------------- practice (f): checkpoint interval of a 70B run
RESTART_70B_S = 900.0  # reschedule 128 nodes, load the checkpoint, warm up (an input)
STORAGE_BYTES_PER_S = 100e9  # aggregate write rate of the cluster's parallel file system (an input)


@experiment(
    "practice-checkpoint",
    "practice: budget a compute-optimal 70B run on 1024 H100s and choose its checkpoint interval",
    kind="computed",
)
def practice_checkpoint(device: str) -> Result:
    from distlab.gpu.flops import flops_per_token
    from distlab.planner.config import model
    from distlab.planner.search import PRETRAIN_BATCH_TOKENS
    from distlab.scaling_laws import optimal_tokens_for, training_flops
    from distlab.throughput.young_daly import (
        daly_seconds,
        expected_wall_seconds,
        llama3_mtbf_seconds,
        lost_fraction,
        optimal_seconds,
        young_seconds,
    )

    r = Result("practice-checkpoint", kind="computed")
    m = model("70B")
    c = cluster("H100-SXM", nodes=128)
    t = Training(global_batch_tokens=PRETRAIN_BATCH_TOKENS, seq=m.seq)
    best = search(m, c, t)[0]
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
    per_token = flops_per_token(m.params(), m.layers, m.hidden, t.seq)
    r.claim(
        "GPU-hours = tokens x FLOPs per token / (peak x MFU)",
        work * c.gpus / 3600,
        tokens * per_token / (c.gpu.peak_flops("bf16") * best.time.mfu / ratio) / 3600,
        rel_tol=1e-9,
    )
    state = 14 * m.params()
    save = state / STORAGE_BYTES_PER_S
    mtbf = llama3_mtbf_seconds() * value("interconnect.Llama3-405B-pretraining.gpus") / c.gpus
    r.add("state", state, "B", "checkpoint: bf16 weights + fp32 master, m, v")
    r.add("save", save, "s", "one save at the storage's rate")
    r.add("mtbf_h", mtbf / 3600, "h", "MTBF of 1024 GPUs at Llama 3's failure rate per GPU")
    r.add("restart", RESTART_70B_S, "s", "restart time (input)")
    young, daly, exact = young_seconds(save, mtbf), daly_seconds(save, mtbf), optimal_seconds(save, mtbf)
    r.add("young", young, "s", "Young: sqrt(2CM)")
    r.add("daly", daly, "s", "Daly's interval")
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
    return r
