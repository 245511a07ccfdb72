"""Advice from a plan in words that cannot drift: what the recommended plan needs (recomputation, offload, a
schedule only some stacks ship), its headroom against the rule, the fastest plan beside it, and the canonical
Megatron layout beside both, all computed from the search (the pages insert them; nothing is typed).

The canonical Megatron layout is what an engineer who has run Megatron-Core proposes without a planner: tensor
parallelism across the whole NVLink node (the largest TP the heads allow inside it), sequence parallelism, pipeline
stages across nodes only as many as memory needs, data parallelism over the rest with the distributed optimizer
(ZeRO-1), the interleaved schedule when there is a pipeline, recomputation only if memory asks for it; it is
searched under those constraints and compared with the recommended plan through chapter 13's band.
"""

from __future__ import annotations

from dataclasses import replace

from distlab.core.formatting import round_sig
from distlab.core.results import Result
from distlab.models.shapes import ModelShape
from distlab.planner.calibration import within_band
from distlab.planner.config import Cluster, Training
from distlab.planner.rules import MIN_HEADROOM, tensor_sizes
from distlab.planner.search import Estimate, fastest, search


def whiteboard(value: float) -> float:
    """A number as a candidate says it at a whiteboard: two significant figures."""
    return round_sig(float(value), 2)


def canonical_megatron(m: ModelShape, c: Cluster, t: Training, min_headroom: float = MIN_HEADROOM) -> Estimate:
    """The canonical Megatron layout's best plan (see the module docstring), under the headroom rule."""
    tp = max(tensor_sizes(m, c).value)

    def canonical(p) -> bool:
        zero = 1 if p.dp * p.cp > 1 else 0
        piped = p.schedule == "interleaved" if p.pp > 1 else True
        return p.tp == tp and p.cp == 1 and p.zero == zero and p.offload == "none" and piped

    t = replace(t, framework="megatron-core", sequence_parallel=True)
    return search(m, c, t, where=canonical, min_headroom=min_headroom)[0]


def _needs(e: Estimate) -> tuple[str, str, str]:
    p = e.plan
    recompute = "fits without recomputation" if p.recompute == "none" else f"needs {p.recompute} recomputation"
    offload = {
        "none": "no CPU offload",
        "optimizer": "needs CPU optimizer offload (ZeRO-Offload: the optimizer state and its update on the host)",
        "params": "needs CPU offload of the optimizer and the weights",
    }[p.offload]
    schedule = (
        "no pipeline"
        if p.pp == 1
        else {
            "1f1b": "1F1B pipeline schedule (every stack with pipelines ships it)",
            "interleaved": f"interleaved 1F1B, {p.virtual} chunks per stage (Megatron-Core and torchtitan ship it)",
            "zb-h1": "ZB-H1 zero-bubble schedule (torchtitan's ScheduleInterleavedZeroBubble; not Megatron-Core's "
            "or DeepSpeed's)",
        }[p.schedule]
    )
    return recompute, offload, schedule


def _stacks_by_hand(e: Estimate, tp_overlap: bool) -> tuple[list[str], list[str]]:
    """(every stack in file order, those whose row has every feature of the plan), distlab/data/stacks.toml read
    with tomllib rather than distlab.planner.stacks: the reference the `runs on` line is checked against."""
    from pathlib import Path

    import tomllib

    import distlab

    rows = tomllib.loads((Path(distlab.__file__).parent / "data" / "stacks.toml").read_text())
    p, order, out = e.plan, [], []
    for name, row in rows.items():
        if name in ("sources", "units") or not isinstance(row, dict) or "zero" not in row:
            continue
        order.append(name)
        piped = p.pp > 1
        ok = (
            (p.tp == 1 or row["tp"])
            and (p.cp == 1 or row["cp"])
            and (p.ep == 1 or row["ep"])
            and (not piped or (row["pp"] and p.schedule in row["schedules"]))
            and p.zero in (row["zero_with_pp"] if piped else row["zero"])
            and p.offload in row["offload"]
            and not (tp_overlap and p.tp > 1 and not row["tp_overlap"])
        )
        if ok:
            out.append(name)
    return order, out


def add_advice(
    r: Result,
    key: str,
    m: ModelShape,
    c: Cluster,
    t: Training,
    ranked: list[Estimate],
    *,
    min_headroom: float = MIN_HEADROOM,
    canonical: bool = True,
) -> None:
    """Quantities `{key}_headroom`, `{key}_usable`, `{key}_recomputes` (0/1), `{key}_offloads` (0/1),
    `{key}_zb` (0/1), `{key}_fastest_slower`, `{key}_fastest_extra_memory`, `{key}_canonical_slower`,
    `{key}_canonical_equal` (0/1), `{key}_stacks` (how many stacks run the plan), the table `{key}_advice` (the
    verdict in words) and the claims that guard them."""
    from distlab.planner.stacks import runners

    best, quick = ranked[0], fastest(ranked)
    who = runners(best.plan, t)
    recompute, offload, schedule = _needs(best)
    r.add(f"{key}_headroom", best.headroom_fraction, "fraction", "the recommended plan's free share of usable memory")
    r.add(f"{key}_headroom_gb", best.usable_bytes * best.headroom_fraction, "B", "... in bytes per GPU")
    r.add(f"{key}_usable", best.usable_bytes, "B", "usable memory per GPU")
    r.add(f"{key}_rule", min_headroom, "fraction", "the headroom rule")
    r.add(f"{key}_recomputes", int(best.plan.recompute != "none"), "", "1 if the recommended plan recomputes")
    r.add(f"{key}_offloads", int(best.plan.offload != "none"), "", "1 if it offloads to the host")
    r.add(f"{key}_zb", int(best.plan.schedule == "zb-h1"), "", "1 if it rests on ZB-H1")
    r.add(f"{key}_stacks", len(who), "stacks", "how many stacks of stacks.toml run the recommended plan whole")
    order, by_hand = _stacks_by_hand(best, t.tp_overlap)
    by_hand = by_hand if t.framework == "any" else [s for s in by_hand if s == t.framework]
    r.claim(
        f"{key}: the stacks that run the recommended plan, re-read from stacks.toml by hand (bit i: its i-th stack)",
        sum(2 ** order.index(s) for s in who),
        sum(2 ** order.index(s) for s in by_hand),
    )
    r.claim(
        f"{key}: at least one stack runs the recommended plan (a plan nobody can launch is no answer)",
        len(who),
        1,
        relation=">=",
    )
    r.claim(
        f"{key}: the recommended plan leaves at least the headroom rule's share of usable memory free",
        1 - best.memory_bytes / best.usable_bytes,
        min_headroom,
        relation=">=",
        unit="fraction",
        formula="1 - memory per GPU / usable per GPU >= MIN_HEADROOM",
    )
    rows = [
        ["recommended", best.plan.label()],
        ["memory", f"{best.memory_bytes / 1e9:.1f} of {best.usable_bytes / 1e9:.1f} GB usable per GPU"],
        ["headroom", f"{best.headroom_fraction:.1%} free (the rule: at least {min_headroom:.0%})"],
        ["recomputation", recompute],
        ["offload", offload],
        ["schedule", schedule],
        ["runs on", ", ".join(who) if who else "no single stack ships this combination"],
        ["step", f"{best.step_seconds:.3g} s"],
    ]
    slower = best.step_seconds / quick.step_seconds - 1
    extra = quick.memory_bytes - best.memory_bytes
    r.add(f"{key}_fastest_slower", slower, "fraction", "how much slower the recommended plan is than the fastest")
    r.add(f"{key}_fastest_extra_memory", extra, "B", "how much more memory per GPU the fastest needs")
    r.add(f"{key}_fastest_headroom", quick.headroom_fraction, "fraction", "the fastest plan's headroom")
    if quick is not best:
        rows.append(
            [
                "fastest plan",
                f"{quick.plan.label()}: {slower:.1%} faster, {extra / 1e9:.1f} GB more per GPU, "
                f"{quick.headroom_fraction:.1%} headroom (below the rule)",
            ]
        )
    else:
        rows.append(["fastest plan", "the recommended plan is also the fastest"])
    if canonical:
        can = canonical_megatron(m, c, t, min_headroom)
        gap = can.step_seconds / best.step_seconds - 1
        equal = within_band(can.time.mfu, best.time.mfu)
        r.add(f"{key}_canonical_slower", gap, "fraction", "the canonical Megatron layout against the recommended")
        r.add(f"{key}_canonical_equal", int(equal), "", "1 if it is inside the recommended plan's error band")
        r.add(f"{key}_canonical_headroom", can.headroom_fraction, "fraction", "its headroom")
        r.add(f"{key}_canonical_tp", can.plan.tp, "", "its TP")
        r.add(f"{key}_canonical_pp", can.plan.pp, "", "its PP")
        verdict = (
            "an equally good answer: inside chapter 13's error band of the recommended plan"
            if equal
            else "not as good: outside chapter 13's error band of the recommended plan"
        )
        rows.append(
            [
                "canonical Megatron layout",
                f"{can.plan.label()}, sequence parallel: {gap:+.1%} step time, {can.headroom_fraction:.1%} "
                f"headroom; {verdict}",
            ]
        )
        from distlab.planner.calibration import stored_error_range

        e_min, _ = stored_error_range()
        r.claim(
            f"{key}: the canonical layout is equally good exactly when its MFU >= the recommended's x (1 + e_min)",
            int(equal),
            int(can.time.mfu >= best.time.mfu * (1 + e_min) or can.time.mfu >= best.time.mfu),
            formula="chapter 13's band: the better prediction inside the other plan's band",
        )
        if equal and can.headroom_fraction >= min_headroom:
            r.claim(
                f"{key}: a canonical plan with headroom inside the band is no faster than the recommendation",
                can.step_seconds,
                best.step_seconds,
                relation=">=",
                rel_tol=1e-3,
                unit="s",
                formula="the recommendation is the fastest plan with headroom within the band",
            )
    r.table(
        f"{key}_advice", ["", "from the plan"], rows, caption="The recommendation in words, from the plan (computed)"
    )
