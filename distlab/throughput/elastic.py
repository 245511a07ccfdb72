"""elastic-spot: goodput and cost of a training job on preemptible (spot) nodes, static vs elastic.

Each of N nodes alternates between up (exponential, mean 1/lambda: its time to preemption) and down
(exponential, mean D: until a replacement arrives). Two ways to run on them:

- static: the job needs all N nodes. A preemption stops it; it waits for the replacement, restarts (R
  seconds) and redoes the work since its last checkpoint. The N - 1 surviving nodes are held (and paid)
  while it waits.
- elastic (torchrun --nnodes=MIN:MAX): the job runs on whatever k >= MIN nodes are up, at k/N of the full
  rate. It waits for nothing, but *every* change of membership, a node lost or a node back, restarts all
  workers from the last checkpoint (torchrun's rendezvous restarts the group), so it pays R and the lost
  work twice per preemption.

Two closed forms check the simulator, both exact for independent alternating renewal processes:
P(a node is up) = 1 / (1 + lambda D), and P(all N are up) = (1 / (1 + lambda D))^N.
"""

from __future__ import annotations

import math

import numpy as np

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.throughput import elastic_checks
from distlab.throughput.young_daly import daly_seconds

HOUR = 3600.0


def simulate(
    nodes: int,
    preempt_per_hour: float,
    replace_hours: float,
    *,
    elastic: bool,
    min_nodes: int,
    interval_s: float,
    save_s: float,
    restart_s: float,
    horizon_hours: float,
    rng: np.random.Generator,
) -> dict[str, float]:
    """Event-driven simulation over `horizon_hours`. Work is counted in full-job hours (N nodes for one
    hour = 1); a run at k nodes makes k/N of it per hour, checkpointed every `interval_s` of running
    (plus `save_s` per save); a membership change loses what is not checkpointed and costs `restart_s`."""
    horizon = horizon_hours * HOUR
    up = np.ones(nodes, dtype=bool)
    change = rng.exponential(HOUR / preempt_per_hour, nodes)  # next up/down flip of each node
    t, committed, paid_node_s, all_up_s, up_node_s = 0.0, 0.0, 0.0, 0.0, 0.0
    run_start, rate = 0.0, 1.0  # the job starts at once on all nodes
    restarts = preemptions = 0

    def commit(until: float) -> float:
        if run_start is None or until <= run_start:
            return 0.0
        saves = math.floor((until - run_start) / (interval_s + save_s))
        return saves * interval_s * rate / HOUR

    while t < horizon:
        i = int(np.argmin(change))
        te = min(change[i], horizon)
        k = int(up.sum())
        up_node_s += k * (te - t)
        all_up_s += (te - t) * (k == nodes)
        paid_node_s += k * (te - t)  # every node that is up is held and paid, running or waiting
        t = te
        if t >= horizon:
            committed += commit(horizon)
            break
        up[i] = not up[i]
        preemptions += not up[i]
        change[i] = t + rng.exponential(HOUR / preempt_per_hour if up[i] else replace_hours * HOUR)
        k_new = int(up.sum())
        runnable = k_new >= min_nodes if elastic else k_new == nodes
        if elastic or not up[i] or runnable:  # static ignores a return that still leaves it short
            committed += commit(t)
            restarts += runnable
            run_start, rate = (t + restart_s, k_new / nodes if elastic else 1.0) if runnable else (None, rate)
    return {
        "work_hours": committed,
        "paid_node_hours": paid_node_s / HOUR,
        "all_up": all_up_s / horizon,
        "node_up": up_node_s / (nodes * horizon),
        "restarts": restarts,
        "preemptions": preemptions,
        "horizon_hours": horizon_hours,
    }


# A scenario, not a fact: 16 nodes, each preempted once per 20 hours on average, replacements after
# 30 minutes, 1-minute saves, 5-minute restarts, spot at 40 % of the on-demand price.
NODES, PREEMPT_PER_HOUR, REPLACE_HOURS = 16, 0.05, 0.5
SAVE_S, RESTART_S, SPOT_PRICE = 60.0, 300.0, 0.4


@experiment(
    "elastic-spot", "simulated goodput and cost on preemptible nodes: static vs elastic restarts", kind="simulated"
)
def elastic_spot(device: str) -> Result:
    r = Result("elastic-spot")
    job_mtbf = HOUR / (PREEMPT_PER_HOUR * NODES)
    interval = daly_seconds(SAVE_S, job_mtbf)
    horizon = 4000.0
    for name, value, unit, desc in [
        ("nodes", NODES, "nodes", "scenario: nodes in the job"),
        ("preempt_per_hour", PREEMPT_PER_HOUR, "/h", "scenario: preemptions per node-hour"),
        ("replace_hours", REPLACE_HOURS, "h", "scenario: mean wait for a replacement node"),
        ("spot_price", SPOT_PRICE, "fraction", "scenario: spot price / on-demand price"),
        ("save_s", SAVE_S, "s", "scenario: checkpoint save"),
        ("restart_s", RESTART_S, "s", "scenario: restart"),
        ("job_mtbf_s", job_mtbf, "s", "static job's mean time between preemptions (1 / (N lambda))"),
        ("interval_s", interval, "s", "checkpoint interval (Daly, for the job's MTBF)"),
        ("horizon_hours", horizon, "h", "simulated wall time per policy"),
    ]:
        r.add(name, value, unit, desc)
    common = dict(interval_s=interval, save_s=SAVE_S, restart_s=RESTART_S, horizon_hours=horizon)
    runs = {
        "on-demand (no preemptions)": simulate(
            NODES, 1e-12, REPLACE_HOURS, elastic=False, min_nodes=NODES, rng=np.random.default_rng(0), **common
        ),
        "spot, static": simulate(
            NODES,
            PREEMPT_PER_HOUR,
            REPLACE_HOURS,
            elastic=False,
            min_nodes=NODES,
            rng=np.random.default_rng(1),
            **common,
        ),
        "spot, elastic (min N/2)": simulate(
            NODES,
            PREEMPT_PER_HOUR,
            REPLACE_HOURS,
            elastic=True,
            min_nodes=NODES // 2,
            rng=np.random.default_rng(1),
            **common,
        ),
    }
    rows = []
    base = runs["on-demand (no preemptions)"]
    base_cost = base["paid_node_hours"] / base["work_hours"]
    for label, s in runs.items():
        price = 1.0 if label.startswith("on-demand") else SPOT_PRICE
        goodput = s["work_hours"] / s["horizon_hours"]
        cost = price * s["paid_node_hours"] / s["work_hours"] / base_cost
        key = {"on-demand (no preemptions)": "ondemand", "spot, static": "static"}.get(label, "elastic")
        r.add(f"{key}_goodput", goodput, "fraction", f"{label}: useful full-job hours per wall hour")
        r.add(f"{key}_cost", cost, "", f"{label}: cost per unit of work / on-demand's")
        r.add(f"{key}_restarts", s["restarts"], "", f"{label}: restarts in {horizon:.0f} h")
        rows.append([label, f"{100 * goodput:.1f} %", f"{cost:.2f}", s["restarts"], f"{100 * s['all_up']:.1f} %"])
    r.table(
        "policies",
        ["policy", "goodput", "cost per unit work (on-demand = 1)", "restarts", "time with all N up (simulated)"],
        rows,
        caption=f"{NODES} nodes, {horizon:.0f} simulated hours per policy, same preemptions for static and elastic",
    )
    static = runs["spot, static"]
    p_up = 1 / (1 + PREEMPT_PER_HOUR * REPLACE_HOURS)
    r.add("p_node_up", p_up, "fraction", "1 / (1 + lambda D)")
    r.add("p_all_up", p_up**NODES, "fraction", "(1 / (1 + lambda D))^N, the closed form")
    r.add("sim_all_up", static["all_up"], "fraction", "the same, simulated (the static policy's run)")
    r.claim(
        "simulated fraction of time a node is up = 1/(1 + λD)",
        static["node_up"],
        p_up,
        rel_tol=0.01,
        formula="alternating renewal process, exponential up and down times",
    )
    r.claim(
        "simulated fraction of time all N nodes are up = (1/(1 + λD))^N",
        static["all_up"],
        p_up**NODES,
        rel_tol=0.05,
        formula="independent nodes",
    )
    r.claim(
        "on-demand goodput = τ/(τ + C) (saves only)",
        base["work_hours"] / base["horizon_hours"],
        interval / (interval + SAVE_S),
        rel_tol=0.01,
        formula="no failures: only checkpoint time is lost",
    )
    elastic_checks.claims(r, min_nodes=NODES // 2)
    return r
