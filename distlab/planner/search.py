"""The planner: every way to run a training step on a cluster that fits in memory, ranked by step time, or the one
way the user fixed.

Given a model, a cluster and the training settings (distlab.planner.config), `search` enumerates the plans that
chapter 7's rules allow (distlab.planner.rules): tensor parallelism inside a node (t divides the heads),
pipeline stages where a pipeline-free plan does not fit (any count up to the layers: stages may hold unequal
layer counts), context parallelism for long sequences, expert parallelism for mixture-of-experts models, data
parallelism for the rest; ZeRO stage 0-3 (with pipelines too), the micro-batch and gradient accumulation (the
global batch is fixed), the pipeline schedule (1F1B, interleaved with v chunks, ZB-H1), recomputation and CPU
offload. Any dimension the caller fixes (`fixed`, the `distlab plan` flags) is kept and the others searched; with
every dimension fixed it prices exactly one plan, and says why in one line if that plan cannot run.

Each plan's memory comes first (cheap: those that do not fit are dropped); the survivors are timed with
distlab.planner.cost, the pipeline by its closed form; the best few are timed again with the pipeline simulator
and re-ranked. Then the headroom rule (distlab.planner.rules.MIN_HEADROOM): among the plans as fast as the fastest
within chapter 13's error band, the fastest that leaves at least that share of the usable memory free is the
recommended plan, first in the list (the fastest follows it when they differ). `explain` says why, in words.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from distlab.models.shapes import ModelShape
from distlab.planner.config import (
    OFFLOAD,
    RECOMPUTE,
    SCHEDULES,
    Cluster,
    Plan,
    Training,
    usable_bytes,
)
from distlab.planner.cost import MemoryBreakdown, StepEstimate, fits, memory_per_gpu, step
from distlab.planner.rules import (
    MIN_HEADROOM,
    context_sizes,
    decisions,
    expert_sizes,
    pipeline_sizes,
    powers_of_two,
    replicate_sizes,
    tensor_sizes,
    zero_stages,
)

MAX_MICRO_BATCH = 64
RESIMULATE = 8  # plans timed again with the op-by-op pipeline simulator
PRETRAIN_BATCH_TOKENS = 4 * 1024 * 1024  # Llama 2's global batch
VIRTUAL_CHUNKS = (2, 3, 4)  # interleaved chunks per stage the search tries (Megatron's runs: 2-3, NeMo's up to 20)
RULES = ("tp-in-node", "cp-long-only", "pp-when-needed")  # chapter 7's rules (distlab.planner.rules)
FIXABLE = (
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "zero",
    "micro_batch",
    "recompute",
    "schedule",
    "virtual",
    "offload",
    "dp_replicate",
    "dp_shard",
)
ALL_FIXED = set(FIXABLE) - {"dp_replicate", "dp_shard"}  # a fully fixed layout (no HSDP unless asked): one plan


@dataclass(frozen=True)
class Estimate:
    """A plan with its memory and time, and the usable memory it was fitted into."""

    plan: Plan
    memory: MemoryBreakdown
    time: StepEstimate
    usable_bytes: float
    """What a plan may fill on one GPU (distlab.planner.config.usable_bytes)."""

    @property
    def memory_bytes(self) -> float:
        return self.memory.device_bytes

    @property
    def headroom_fraction(self) -> float:
        """The share of the usable memory the plan leaves free: 1 - memory / usable."""
        return 1 - self.memory_bytes / self.usable_bytes

    @property
    def step_seconds(self) -> float:
        return self.time.seconds

    def to_dict(self) -> dict:
        """`distlab plan --json`: the keys it has always had, and the breakdown and band of this model."""
        from distlab.planner.calibration import mfu_band

        p, t = self.plan, self.time
        return {
            "label": p.label(),
            "dp": p.dp,
            "dp_shard": p.dp_shard,
            "dp_replicate": p.dp_replicate,
            "tp": p.tp,
            "pp": p.pp,
            "cp": p.cp,
            "ep": p.ep,
            "zero": p.zero,
            "micro_batch": p.micro_batch,
            "grad_accumulation": p.microbatches,
            "recompute": p.recompute,
            "offload": p.offload,
            "schedule": p.schedule,
            "virtual": p.virtual,
            "memory_bytes_per_gpu": self.memory_bytes,
            "usable_bytes_per_gpu": self.usable_bytes,
            "headroom_fraction": self.headroom_fraction,
            "memory_by_category": self.memory.as_dict(),
            "memory_by_phase": self.memory.by_phase(),
            "peak_phase": self.memory.peak_phase,
            "allocator_peak_bytes": self.memory.allocator_peak_bytes,
            "reserved_bytes": self.memory.reserved_bytes,
            "outside_allocator_bytes": self.memory.outside_allocator_bytes,
            "host_bytes_per_gpu": self.memory.host,
            "step_seconds": t.seconds,
            "time_by_component": t.time_by_component(),
            "step_breakdown": t.breakdown.as_dict(),
            "mfu": t.mfu,
            "mfu_causal": t.mfu_causal,
            "mfu_band": list(mfu_band(t.mfu)),
            "hfu": t.hfu,
            "tflops_per_gpu": t.tflops_per_gpu,
            "tokens_per_second": t.tokens_per_second,
            # the pipeline simulator's inputs, per stage and micro-batch (the Plan page draws the step from them)
            "stage_seconds": {
                "forward": list(t.stage_forward_seconds),
                "backward": list(t.stage_backward_seconds),
                "p2p": t.p2p_seconds,
            },
        }


class NothingFits(ValueError):
    """No plan fits (or none divides the batch): the message says by how much."""


def _options(fixed: dict, name: str, default):
    return [fixed[name]] if name in fixed else list(default)


def candidates(
    m: ModelShape,
    c: Cluster,
    t: Training,
    rules=RULES,
    fixed: dict | None = None,
    min_headroom: float = MIN_HEADROOM,
):
    """Every plan that tiles the cluster and splits the global batch evenly (memory not checked yet), as chapter 7's
    rules allow (distlab.planner.rules): TP sizes that divide the heads, inside a node ("tp-in-node"); CP only
    from LONG_SEQ tokens ("cp-long-only"); pipelines only where a pipeline-free ZeRO-1 plan does not fit
    ("pp-when-needed"). Leaving a rule out of `rules` lifts it (to check that the rules drop no best plan);
    a dimension in `fixed` takes only that value (the rules then do not apply to it)."""
    fixed = fixed or {}
    unknown = set(rules) - set(RULES)
    if unknown:
        raise ValueError(f"unknown rules {sorted(unknown)}; known: {', '.join(RULES)}")
    moe = t.moe
    flash = t.attention == "flash"
    tps = _options(fixed, "tp", tensor_sizes(m, c, within_node="tp-in-node" in rules).value)
    for tp in tps:
        if c.gpus % tp or m.heads % tp or m.kv % tp:  # a fixed TP too: every rank holds whole heads
            continue
        cps = _options(fixed, "cp", context_sizes(m, c, t, tp, long_only="cp-long-only" in rules).value)
        for cp in cps:
            if c.gpus % (tp * cp):
                continue
            pps = _options(
                fixed,
                "pp",
                pipeline_sizes(
                    m,
                    c,
                    t,
                    tp,
                    cp,
                    only_when_needed="pp-when-needed" in rules and "pp" not in fixed,
                    min_headroom=min_headroom,
                ).value,
            )
            for pp in pps:
                if c.gpus % (tp * cp * pp) or pp > m.layers:
                    continue
                dp = c.gpus // (tp * cp * pp)
                if "dp" in fixed and fixed["dp"] != dp:
                    continue
                if t.sequences % dp:
                    continue
                per_replica = t.sequences // dp
                bs = (
                    [fixed["micro_batch"]]
                    if "micro_batch" in fixed
                    else powers_of_two(min(per_replica, MAX_MICRO_BATCH))
                )
                for b in bs:
                    if per_replica % b:
                        continue
                    n = per_replica // b
                    if pp > 1 and n < pp:
                        continue
                    yield from _rest(m, c, t, fixed, tp, pp, dp, cp, b, n, flash, moe)


def _rest(m, c, t, fixed, tp, pp, dp, cp, b, n, flash, moe):
    """The dimensions that do not change the layout: EP, ZeRO, schedule, recomputation, offload."""
    group = dp * cp
    eps = _options(fixed, "ep", expert_sizes(moe, group).value if moe else [1])
    if pp > 1:
        scheds = [("1f1b", 1), ("zb-h1", 1)] + [
            ("interleaved", v) for v in VIRTUAL_CHUNKS if n % pp == 0 and m.layers % (pp * v) == 0
        ]
    else:
        scheds = [("1f1b", 1)]
    if "schedule" in fixed:
        v_fixed = fixed.get("virtual")
        if fixed["schedule"] == "interleaved":
            vs = [v_fixed] if v_fixed else [v for v in VIRTUAL_CHUNKS if m.layers % (pp * v) == 0] or [2]
            scheds = [("interleaved", v) for v in vs if pp * v <= m.layers]  # every chunk holds a layer
        else:
            scheds = [(fixed["schedule"], 1)]
    elif "virtual" in fixed:
        v = fixed["virtual"]
        scheds = [("interleaved", v)] if v > 1 else [s for s in scheds if s[1] == 1]
        if pp * v > m.layers:  # uneven chunks are allowed when fixed (Megatron splits 126 layers over 8 x 8), empty not
            scheds = []
    recs = _options(fixed, "recompute", ("none", "full") if flash else ("none", "selective", "full"))
    for ep in eps:
        for zero in _options(fixed, "zero", zero_stages(pp, group).value):
            offloads = _options(
                fixed,
                "offload",
                ["none"] + (["optimizer"] if zero >= 1 else []) + (["params"] if zero == 3 else []),
            )
            reps = _options(fixed, "dp_replicate", replicate_sizes(c, tp, cp, dp, zero).value)
            if "dp_shard" in fixed:  # --dp-shard N: the replicas are what is left of DP
                rep = dp // fixed["dp_shard"] if dp % fixed["dp_shard"] == 0 else 0
                reps = [rep] if rep and fixed.get("dp_replicate", rep) == rep else []
            for schedule, v, recompute, offload, replicate in (
                (s, v, r, o, k) for s, v in scheds for r in recs for o in offloads for k in reps
            ):
                if group == 1 and zero > 0 and offload == "none" and "zero" not in fixed:
                    continue  # nothing to shard over: the same as zero 0
                try:
                    yield Plan(
                        tp=tp,
                        pp=pp,
                        dp=dp,
                        cp=cp,
                        ep=ep,
                        zero=zero,
                        micro_batch=b,
                        microbatches=n,
                        recompute=recompute,
                        offload=offload,
                        schedule=schedule,
                        virtual=v,
                        dp_replicate=replicate,
                    )
                except ValueError:
                    if ALL_FIXED <= set(fixed):
                        raise
                    continue


def check_fixed(fixed: dict) -> None:
    """Fixed values must be of the kinds the search enumerates."""
    for k, v in fixed.items():
        if k not in FIXABLE:
            raise ValueError(f"cannot fix {k!r}; fixable: {', '.join(FIXABLE)}")
        allowed = {"recompute": RECOMPUTE, "schedule": SCHEDULES, "offload": OFFLOAD, "zero": (0, 1, 2, 3)}.get(k)
        if allowed and v not in allowed:
            raise ValueError(f"{k} must be one of {', '.join(map(str, allowed))}, not {v!r}")


_RECOMPUTE_RANK = {"none": 0, "selective": 1, "full": 2}
_OFFLOAD_RANK = {"none": 0, "optimizer": 1, "params": 2}


def _dominates(q: Plan, p: Plan) -> bool:
    """q is p with less recomputation and less offload (and not p itself): the cost model times q no slower."""
    rq, rp = _RECOMPUTE_RANK[q.recompute], _RECOMPUTE_RANK[p.recompute]
    oq, op = _OFFLOAD_RANK[q.offload], _OFFLOAD_RANK[p.offload]
    return q != p and rq <= rp and oq <= op


def _why_not(m: ModelShape, c: Cluster, t: Training, fixed: dict) -> str:
    """One line: why the fixed layout cannot tile the cluster or split the batch."""
    tp, pp, cp = fixed.get("tp", 1), fixed.get("pp", 1), fixed.get("cp", 1)
    if c.gpus % (tp * pp * cp):
        return f"TP {tp} x PP {pp} x CP {cp} = {tp * pp * cp} does not divide the {c.gpus} GPUs"
    dp = c.gpus // (tp * pp * cp)
    if "dp" in fixed and fixed["dp"] != dp:
        return f"DP {fixed['dp']} x TP {tp} x PP {pp} x CP {cp} is not the {c.gpus} GPUs (DP would be {dp})"
    if m.heads % tp or m.kv % tp:
        return f"TP {tp} does not divide the {m.heads} heads and {m.kv} key/value heads"
    if t.sequences % dp:
        return f"the {t.sequences:,} sequences per step do not split over DP {dp}"
    rep, shard = fixed.get("dp_replicate", 1), fixed.get("dp_shard")
    if shard and dp % shard:
        return f"--dp-shard {shard} does not divide DP {dp} (shard x replicate must be DP)"
    if shard and "dp_replicate" in fixed and shard * rep != dp:
        return f"--dp-shard {shard} x --dp-replicate {rep} = {shard * rep} is not DP {dp}"
    if dp % rep:
        return f"--dp-replicate {rep} does not divide DP {dp} (shard x replicate must be DP)"
    if rep > 1 and fixed.get("zero", 1) == 0:
        return "hybrid sharding shards inside each replica: it needs ZeRO 1, 2 or 3, not DDP"
    per = t.sequences // dp
    b = fixed.get("micro_batch")
    if b and per % b:
        return f"micro-batch {b} does not divide the {per} sequences each of the DP {dp} replicas gets per step"
    if pp > 1 and b and per // b < pp:
        return f"{per // b} micro-batches per step cannot fill {pp} pipeline stages"
    v = fixed.get("virtual", 1)
    if pp * v > m.layers:
        return f"{v} model chunks on each of {pp} stages are more chunks than the {m.layers} layers"
    return "no plan of the fixed dimensions exists (an interleaved schedule needs micro-batches divisible by PP)"


def search(
    m: ModelShape,
    c: Cluster,
    t: Training,
    *,
    where=None,
    rules=None,
    fixed: dict | None = None,
    hbm: float | None = None,
    share: float | None = None,
    min_headroom: float = MIN_HEADROOM,
    unrestricted: bool = False,
    sizer=None,
) -> list[Estimate]:
    """Feasible plans: the recommended one first (`recommend`: the headroom rule), then the others fastest first
    (ties: less memory); the first RESIMULATE with the simulated pipeline. `where(plan) -> bool` restricts the
    search (a published configuration, one ZeRO stage, ...); `fixed` pins dimensions by name. `rules` (see
    candidates): by default all of RULES, or all but "pp-when-needed" when the search is restricted (a restriction
    may ask about pipelines the rule would skip). `min_headroom` = 0 ranks by time alone (the published runs of
    chapter 13 are compared fastest to fastest). A `t.framework` other than "any" keeps to that stack, and "any"
    to plans one stack runs whole (distlab.planner.stacks.allows); `unrestricted` lifts that for "any": every
    technique the cost model prices, combined freely (`--framework unrestricted`). `sizer(m, c, t, plan)` replaces
    memory_per_gpu (a check sizes each plan by hand and searches again)."""
    from distlab.planner.stacks import allows, check

    fixed = dict(fixed or {})
    check_fixed(fixed)
    check(t)
    if not 0 <= min_headroom < 1:
        raise ValueError(f"min_headroom must be in [0, 1), not {min_headroom!r}")
    if rules is None:
        rules = RULES if where is None and "pp" not in fixed else tuple(r for r in RULES if r != "pp-when-needed")
    budget = usable_bytes(c.gpu)
    fits_, seen, least, shipless = [], 0, None, None
    groups: dict[Plan, list[tuple[Plan, MemoryBreakdown]]] = {}
    for p in candidates(m, c, t, rules, fixed, min_headroom):
        if where is not None and not where(p):
            continue
        if not (unrestricted and t.framework == "any") and not allows(t.framework, p, t.tp_overlap):
            shipless = shipless or p
            continue
        seen += 1
        mem = (sizer or memory_per_gpu)(m, c, t, p)
        if least is None or mem.device_bytes < least[0]:
            least = (mem.device_bytes, p, mem.host)
        if fits(m, c, t, p, mem):
            groups.setdefault(replace(p, recompute="none", offload="none"), []).append((p, mem))
    roomy = (1 - min_headroom) * budget
    for variants in groups.values():  # time only what a faster variant that also fits with headroom does not dominate
        for p, mem in variants:
            if not any(_dominates(q, p) and qm.device_bytes <= roomy for q, qm in variants):
                fits_.append(Estimate(p, mem, step(m, c, t, p, exact_pipeline=False, hbm=hbm, share=share), budget))
    if least is None:  # no candidate at all (seen == 0): every candidate sets least
        if shipless is not None:
            if t.framework == "any":
                raise NothingFits(
                    f"no single stack ships {shipless.label()}: stacks.toml has no stack that runs all of its "
                    "features together (--framework unrestricted prices it anyway)"
                )
            raise NothingFits(f"{t.framework} does not ship {shipless.label()} (distlab/data/stacks.toml)")
        if fixed:
            raise NothingFits(f"no such plan: {_why_not(m, c, t, fixed)}")
        raise NothingFits(
            f"no plan splits a global batch of {t.sequences:,} sequences of {t.seq:,} tokens over "
            f"{c.gpus} GPUs evenly (data parallelism needs the sequences to divide); change the batch "
            "or the GPU count"
        )
    if not fits_:
        host_budget = c.host_bytes / c.gpus_per_node * 0.9
        host = (
            f" and {least[2] / 1e9:.0f} GB of host memory per GPU ({host_budget / 1e9:.0f} GB usable)"
            if least[2]
            else ""
        )
        what = "the plan" if seen == 1 else "the plan that needs the least GPU memory"
        raise NothingFits(
            f"nothing fits: {what} ({least[1].label()}) needs {least[0] / 1e9:.1f} GB per GPU "
            f"({budget / 1e9:.1f} GB usable on a {c.gpu.name}){host}; "
            "add GPUs, shorten the sequence, recompute, or use a GPU with more memory"
        )
    key = lambda e: (round(e.step_seconds, 9), e.memory_bytes)
    fits_.sort(key=key)
    head = [
        Estimate(e.plan, e.memory, step(m, c, t, e.plan, exact_pipeline=True, hbm=hbm, share=share), budget)
        for e in fits_[:RESIMULATE]
    ]
    by_time = sorted(head, key=key) + fits_[RESIMULATE:]
    pick = recommend(by_time, min_headroom)
    return [by_time[pick]] + by_time[:pick] + by_time[pick + 1 :]


def recommend(by_time: list[Estimate], min_headroom: float = MIN_HEADROOM) -> int:
    """The headroom rule: of the plans the planner cannot tell from the fastest (its predicted MFU inside their
    band, chapter 13: distlab.planner.calibration.within_band), the fastest that leaves at least min_headroom of the
    usable memory free; if none does, the one of them that leaves the most. Returns its index in `by_time`."""
    from distlab.planner.calibration import within_band

    best = by_time[0].time.mfu
    band = [i for i, e in enumerate(by_time) if within_band(e.time.mfu, best)]
    roomy = [i for i in band if by_time[i].headroom_fraction >= min_headroom - 1e-12]
    return roomy[0] if roomy else max(band, key=lambda i: (by_time[i].headroom_fraction, -i))


def freer(
    m: ModelShape,
    c: Cluster,
    t: Training,
    ranked: list[Estimate],
    *,
    fixed: dict | None = None,
    min_headroom: float = MIN_HEADROOM,
) -> dict | None:
    """What keeping to one stack costs: the recommendation of an unrestricted search (every technique combined
    freely) when no stack runs it and it is faster than ranked[0], with how much; None otherwise (a named stack, or
    realism costs nothing). `distlab plan --json`: the recommended plan's `unrestricted_plan`."""
    from distlab.planner.stacks import runners

    if t.framework != "any":
        return None
    try:
        free = search(m, c, t, fixed=fixed, min_headroom=min_headroom, unrestricted=True)[0]
    except NothingFits:
        return None
    best = ranked[0]
    if runners(free.plan, t) or free.step_seconds >= best.step_seconds:
        return None
    return {
        "label": free.plan.label(),
        "step_seconds": free.step_seconds,
        "headroom_fraction": free.headroom_fraction,
        "faster_fraction": best.step_seconds / free.step_seconds - 1,
    }


def stacks_line(t: Training, best: Estimate, free: dict | None = None) -> str:
    """Which stacks run the recommended plan, and (`freer`) what a combination no stack ships would gain."""
    from distlab.planner.stacks import runners

    who = runners(best.plan, t)
    line = (
        f"Runs on {', '.join(who)}: {'each ships' if len(who) > 1 else 'it ships'} all of this plan's features "
        "together (distlab/data/stacks.toml)"
        if who
        else "No single stack ships this combination (an unrestricted search, --framework unrestricted): "
        "a teaching answer, not a launchable one"
    )
    if free is not None:
        line += f"; a combination no stack ships ({free['label']}) would be {free['faster_fraction']:.1%} faster"
    return line + "."


def fastest(ranked: list[Estimate]) -> Estimate:
    """The fastest plan of a search's answer (the recommended plan, or the one right after it)."""
    return min(ranked[:2], key=lambda e: (round(e.step_seconds, 9), e.memory_bytes))


# ---------------------------------------------------------------- the winner in words
def _share(e: Estimate, part: str) -> float:
    return getattr(e.time.breakdown, part) / e.step_seconds


def versus_fastest(ranked: list[Estimate]) -> dict | None:
    """Where the recommended plan (ranked[0]) is not the fastest: the fastest, and what the recommendation costs in
    time and saves in memory (`distlab plan --json`: the recommended plan's `fastest_plan`)."""
    best, quick = ranked[0], fastest(ranked)
    if quick is best:
        return None
    return {
        "label": quick.plan.label(),
        "step_seconds": quick.step_seconds,
        "memory_bytes_per_gpu": quick.memory_bytes,
        "headroom_fraction": quick.headroom_fraction,
        "step_seconds_difference": best.step_seconds - quick.step_seconds,
        "slower_fraction": best.step_seconds / quick.step_seconds - 1,
        "memory_bytes_difference": best.memory_bytes - quick.memory_bytes,
    }


def headroom_line(best: Estimate, min_headroom: float = MIN_HEADROOM) -> str:
    """The recommended plan's headroom against the rule, in words."""
    free = best.headroom_fraction
    verdict = (
        f"meets the headroom rule (at least {min_headroom:.0%} free)"
        if free >= min_headroom - 1e-12
        else f"BELOW the headroom rule of {min_headroom:.0%}: no plan as fast within the band leaves more; expect "
        "out-of-memory risk on long batches (add GPUs, recompute, or offload)"
    )
    return (
        f"Headroom {free:.1%} ({best.usable_bytes * free / 1e9:.1f} GB free per GPU): {verdict}; the memory model "
        "leaves out backward temporaries, workspaces and allocator fragmentation spikes, which this margin absorbs."
    )


def explain(
    m: ModelShape,
    c: Cluster,
    t: Training,
    ranked: list[Estimate],
    min_headroom: float = MIN_HEADROOM,
    free: dict | None = None,
) -> list[str]:
    """Why the first plan of `ranked` is the one to run, for an engineer defending it; `free` (from `freer`) adds
    what a combination no stack ships would gain."""
    from distlab.planner.calibration import mfu_band

    best, p = ranked[0], ranked[0].plan
    budget = usable_bytes(c.gpu)
    mem = best.memory
    out = [
        f"Fits: {best.memory_bytes / 1e9:.1f} GB of the {budget / 1e9:.1f} GB usable per GPU (weights "
        f"{mem.weights / 1e9:.1f}, gradients {mem.gradients / 1e9:.1f}, optimizer {mem.optimizer / 1e9:.1f}"
        f", activations {mem.activations / 1e9:.1f}, NCCL buffers {mem.comm_buffers / 1e9:.1f} GB; model state in "
        f"the {t.precision} convention).",
        headroom_line(best, min_headroom),
        stacks_line(t, best, free),
    ]
    vs = versus_fastest(ranked)
    if vs is not None:
        out.append(
            f"Recommended over the fastest plan ({vs['label']}, {vs['headroom_fraction']:.1%} headroom): "
            f"{vs['slower_fraction']:.1%} slower ({vs['step_seconds_difference']:.3g} s per step) for "
            f"{-vs['memory_bytes_difference'] / 1e9:.1f} GB less per GPU; within chapter 13's error band the planner "
            "cannot tell them apart on time, so the one with headroom wins."
        )
    if t.framework != "any":
        from distlab.planner.stacks import describe

        out.append(f"Restricted to what the stack ships: {describe(t.framework)}.")
    rules = decisions(m, c, t, p, min_headroom)
    out.append(
        f"Searched under chapter 7's rules: {rules['tensor'].reason}; {rules['pipeline'].reason}; "
        f"{rules['context'].reason}."
    )
    if p.tp > 1:
        overlap = "overlapped with the GEMMs next to them" if t.tp_overlap else "on the critical path (no overlap)"
        out.append(
            f"Tensor parallelism {p.tp} stays inside one {c.domain}-GPU NVLink domain; its collectives, {overlap}, "
            f"leave {_share(best, 'exposed_tp'):.1%} of the step exposed."
        )
    if p.pp > 1:
        sched = f"the {p.schedule} schedule" + (f" with {p.virtual} chunks per stage" if p.virtual > 1 else "")
        out.append(
            f"{p.pp} pipeline stages, {sched}, {p.microbatches} micro-batches each: the bubble is "
            f"{_share(best, 'bubble'):.1%} of the step."
        )
    if p.zero > 0:
        ddp = memory_per_gpu(m, c, t, replace(p, zero=0, offload="none", dp_replicate=1)).model_states
        verdict = "more than fits" if ddp + mem.activations > budget else "it would fit, but no faster"
        out.append(f"Without sharding (DDP) the model state alone would be {ddp / 1e9:.1f} GB per GPU: {verdict}.")
    zero = {
        0: "DDP (every GPU keeps all model state)",
        1: "ZeRO-1 (optimizer state sharded)",
        2: "ZeRO-2 (optimizer state and gradients sharded)",
        3: "ZeRO-3/FSDP (everything sharded; each layer gathered before its forward and again before its "
        "backward, every micro-batch, hidden only behind the layer before it)",
    }[p.zero]
    if p.zero == 3 and p.pp > 1:
        zero = (
            "ZeRO-3/FSDP with a pipeline (each stage's weights gathered once per step and kept, gradients "
            "reduce-scattered once at its end: ZeRO-1's memory and traffic plus one gather)"
        )
    if p.dp_replicate > 1:
        zero += (
            f", hybrid-sharded: {p.dp_shard} ranks shard each replica, {p.dp_replicate} replicas all-reduce the "
            "gradient shards"
        )
    out.append(
        f"Data parallelism {p.dp * p.cp} with {zero}: its communication leaves "
        f"{_share(best, 'exposed_dp'):.1%} of the step exposed."
    )
    if t.moe is not None:
        inside = p.tp * p.ep <= c.domain
        line = (
            f"Expert parallelism {p.ep} ({t.moe.experts // p.ep} of the {t.moe.experts} experts per GPU), its group "
            f"{'inside one NVLink domain' if inside else 'across NVLink domains'}: the all-to-alls leave "
            f"{_share(best, 'exposed_cp_ep'):.1%} of the step exposed"
        )
        wide = next((e for e in ranked if e.plan.tp * e.plan.ep > c.domain), None)
        if inside and wide is not None:
            line += (
                f"; the best plan whose EP group leaves the node ({wide.plan.label()}) is "
                f"{wide.step_seconds / best.step_seconds - 1:.1%} slower: keep EP inside the NVLink domain"
            )
        out.append(line + ".")
    out.append(
        f"Micro-batch of {p.micro_batch} sequence(s), {p.microbatches} accumulated per step: "
        f"{p.micro_batch * p.microbatches * p.dp} sequences = {t.global_batch_tokens:,} tokens per step."
    )
    if p.recompute != "none":
        out.append(
            f"{p.recompute.capitalize()} recomputation costs {_share(best, 'recompute'):.0%} of the step; "
            "without it the activations would not fit, or fit only with a slower plan."
        )
    if p.offload != "none":
        out.append(
            f"Offloading the {'optimizer' if p.offload == 'optimizer' else 'optimizer and parameters'} to the host "
            f"makes it fit; the transfers and the host's update cost {_share(best, 'offload'):.1%} of the step, a "
            "lower bound (the update is priced at the host DRAM's peak bandwidth, shared by the node's GPUs, not at a "
            f"measured CPU-Adam rate: chapter 6); host memory {mem.host * c.gpus_per_node / 1e9:.0f} GB per node of "
            f"{c.host_bytes / 1e9:,.0f} GB."
        )
    lo, hi = mfu_band(best.time.mfu)
    out.append(
        f"Step {best.step_seconds:.3g} s: compute {_share(best, 'compute'):.0%}; MFU {best.time.mfu:.1%} by the model "
        f"({lo:.0%}-{hi:.0%} given its errors on published runs, chapter 13), "
        f"{best.time.tokens_per_second:,.0f} tokens/s."
    )
    if best.time.mfu > 1.05 * best.time.mfu_causal:
        out.append(
            "MFU counts attention over all s x s scores (6N + 12Lhs, as published figures do); a causal "
            "model needs only the unmasked half, the half FlashAttention computes. Counting only that half "
            f"(6N + 6Lhs): {best.time.mfu_causal:.1%}."
        )
    quick = fastest(ranked)
    nxt = next((e for e in ranked[1:] if e is not quick and e.headroom_fraction >= min_headroom - 1e-12), None)
    nxt = nxt if vs is not None else (nxt or (ranked[1] if len(ranked) > 1 else None))
    if nxt is not None:
        a, b = best.time.breakdown.as_dict(), nxt.time.breakdown.as_dict()
        diff = {k: b[k] - a[k] for k in a}
        worst = max(diff, key=lambda k: diff[k])
        slower = nxt.step_seconds / best.step_seconds - 1
        why = (
            f"mostly {worst.replace('_', ' ')}"
            if slower >= 0.005
            else (
                f"a tie on time; it needs {abs(nxt.memory_bytes - best.memory_bytes) / 1e9:.1f} GB "
                f"{'more' if nxt.memory_bytes >= best.memory_bytes else 'less'} per GPU"
            )
        )
        out.append(
            f"Runner-up: {nxt.plan.label()}, {slower:.1%} {'slower' if slower >= 0 else 'faster'} ({why}; "
            f"headroom {nxt.headroom_fraction:.1%})."
        )
    return out


def finetune_batch_sequences() -> int:
    """Llama 2-Chat's supervised fine-tune used 64 sequences per step (distlab/data/scaling_laws.toml)."""
    from distlab.core.facts import value

    return value("scaling_laws.Llama2-SFT.batch_sequences")


def planning_seconds(m: ModelShape, c: Cluster, t: Training) -> tuple[float, int]:
    """Wall seconds of one full search and how many plans fit (the README's benchmark)."""
    import time

    start = time.perf_counter()
    ranked = search(m, c, t)
    return time.perf_counter() - start, len(ranked)
