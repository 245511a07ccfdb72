"""GPipe, 1F1B, interleaved, ZB-H1 and ZB-V simulated op by op: bubbles, activations in flight, p2p cost and
figures (experiment pipeline-schedules), from the simulator in distlab.model_parallel.pipeline; ZB-V and
DualPipe against the closed forms their papers print (distlab/data/pipeline_schedules.toml)."""

from __future__ import annotations

import math
import re

from distlab.core.experiments import experiment
from distlab.core.facts import fact, value
from distlab.core.results import Result
from distlab.model_parallel.pipeline import (
    COLORS,
    B,
    F,
    W,
    bubble_fraction,
    draw_timeline,
    interleaved_peak_inflight,
    schedule_order,
    simulate,
    virtual_stage,
    zb_h1_bubble_fraction,
    zb_v_bubble_fraction,
)

# ---------------------------------------------------------------- the experiment
SIZES = [(2, 1), (2, 7), (4, 2), (4, 8), (4, 32), (8, 8), (8, 64), (5, 13)]  # awkward ones included


INTERLEAVED = [(4, 8, 2), (4, 16, 4), (8, 16, 2), (3, 9, 3), (8, 32, 4)]


BIG = (128, 4096)


@experiment(
    "pipeline-schedules",
    "GPipe, 1F1B, interleaved, ZB-H1 and ZB-V simulated op by op: bubble and "
    "activations in flight against their closed forms; DualPipe's and ZB-V's published forms",
    kind="simulated",
)
def pipeline_schedules(device: str) -> Result:
    r = Result("pipeline-schedules")
    rows = []
    for p, m in SIZES:
        formula = bubble_fraction(p, m)
        for schedule in ("gpipe", "1f1b"):
            sim = simulate(p, m, schedule)
            rows.append([schedule, p, m, "—", sim.step_time, sim.bubble_fraction, formula, sim.peak_inflight[0]])
            r.claim(
                f"{schedule} p={p} m={m}: bubble = (p-1)/(m+p-1)",
                sim.bubble_fraction,
                formula,
                rel_tol=1e-12,
                unit="fraction",
                formula="(p-1)/(m+p-1)",
            )
        r.claim(
            f"gpipe p={p} m={m}: every stage holds m micro-batches",
            min(simulate(p, m, "gpipe").peak_inflight),
            m,
            formula="m",
        )
        r.claim(f"1f1b p={p} m={m}: stage 0 holds min(p, m)", sim.peak_inflight[0], min(p, m), formula="min(p, m)")
        off = max(abs(peak - min(p - d, m)) for d, peak in enumerate(sim.peak_inflight))
        r.claim(
            f"1f1b p={p} m={m}: stage d holds min(p-d, m), largest miss over stages",
            off,
            0,
            formula="min(p-d, m) for d = 0..p-1",
        )
    for p, m, v in INTERLEAVED:
        sim = simulate(p, m, "interleaved", virtual=v)
        formula = bubble_fraction(p, m, v)
        rows.append(["interleaved", p, m, v, sim.step_time, sim.bubble_fraction, formula, sim.peak_inflight[0]])
        r.claim(
            f"interleaved p={p} m={m} v={v}: bubble",
            sim.bubble_fraction,
            formula,
            rel_tol=1e-9,
            unit="fraction",
            formula="((p-1)/v)/(m+(p-1)/v)",
        )
        r.claim(
            f"interleaved p={p} v={v}: stage 0 holds p + (p-1)/v",
            sim.peak_inflight[0],
            interleaved_peak_inflight(p, v, m),
            rel_tol=1e-12,
            formula="p(1 + (p-1)/(pv))",
        )
    for p, m in [(4, 8), (8, 64), (5, 13), (4, 4)]:
        sim = simulate(p, m, "zb-h1")
        formula = zb_h1_bubble_fraction(p, m)
        rows.append(["zb-h1", p, m, "—", sim.step_time, sim.bubble_fraction, formula, sim.peak_inflight[0]])
        r.claim(
            f"zb-h1 p={p} m={m}: bubble = (p-1)(F+B-W)/step",
            sim.bubble_fraction,
            formula,
            rel_tol=1e-12,
            unit="fraction",
            formula="F = B = W = 1, m >= p",
        )
        r.claim(
            f"zb-h1 p={p} m={m}: no stage holds more than p",
            max(sim.peak_inflight),
            min(p, m),
            relation="<=",
            formula="same memory as 1F1B's first stage",
        )
    r.table(
        "bubbles",
        ["schedule", "p", "m", "v", "step time", "bubble (simulated)", "bubble (formula)", "stage 0 peak in flight"],
        rows,
        caption="Times in units of one micro-batch forward through one stage (backward = 2).",
    )
    _zb_v(r)
    _table2(r)
    _p2p(r)
    _big(r)
    _quantities(r)
    _figures(r)
    _picture(r)
    return r


P2P_MODEL, P2P_TP, P2P_NIC = "70B", 8, "InfiniBand-NDR"  # a 70B pipeline across nodes: TP 8 in the node, one NIC/GPU


def realistic_p2p(r: Result, p: int) -> tuple[float, float]:
    """δ for a real pipeline, in units of one micro-batch's forward through one stage: Llama 2 70B, TP 8 inside
    each node, p stages across nodes, one sequence per micro-batch. The message is the (s, b, h) bf16 activation;
    Megatron sends each tensor-parallel rank's 1/t of it over that rank's own NIC (scatter-gather, on with sequence
    parallelism), or the whole tensor from each rank without it. The forward runs at the bf16 peak, so δ is at its
    largest (a slower forward makes δ smaller)."""
    from distlab.hardware.gpus import gpu
    from distlab.hardware.links import per_direction_bytes_per_s
    from distlab.models.shapes import preset

    m = preset(P2P_MODEL)
    message = m.seq * 1 * m.hidden * 2  # s x b x h bf16
    nic = per_direction_bytes_per_s(P2P_NIC)
    forward = 2 * m.params() / p / P2P_TP * m.seq / gpu("H100-SXM").peak_flops("bf16")  # 2 FLOPs / param / token
    split, whole = message / P2P_TP / nic / forward, message / nic / forward
    r.add("p2p_message_bytes", message, "B", "one micro-batch's activation between stages (70B, s = 4096, b = 1)")
    r.add("p2p_nic_bytes_per_s", nic, "B/s", f"{P2P_NIC} per direction")
    r.add("p2p_forward_s", forward, "s", f"one stage's forward of it at the bf16 peak, TP {P2P_TP}, p = {p}")
    r.add("p2p_delta_split", split, "", "δ with each TP rank sending its 1/t (Megatron's scatter-gather)")
    r.add("p2p_delta_whole", whole, "", "δ with each rank sending the whole activation")
    r.claim(
        "δ = s h 2 B / t / NIC over 2 (N/p/t) s / peak: the sequence cancels, δ = h p peak / (N NIC)",
        split,
        m.hidden * p * gpu("H100-SXM").peak_flops("bf16") / (m.params() * nic),
        rel_tol=1e-9,
        formula="bytes over the link against the stage's forward",
    )
    r.claim(
        "δ with whole activations: every rank sends t times the bytes, δ = t h p peak / (N NIC)",
        whole,
        P2P_TP * m.hidden * p * gpu("H100-SXM").peak_flops("bf16") / (m.params() * nic),
        rel_tol=1e-9,
    )
    return split, whole


ZB_V = [(4, 8), (4, 7), (8, 16), (8, 64), (5, 13), (3, 5)]  # m >= 2p-1; (4, 7) and (3, 5) at the bound


def p2p_sends(schedule: str, stages: int, microbatches: int, virtual: int = 1) -> int:
    """Activations sent from one device to another in a step, counted from the op orders: every F whose input
    (the previous virtual stage's F of the same micro-batch) ran on another device. Backward sends as many."""
    orders = schedule_order(schedule, stages, microbatches, virtual)
    owner = {virtual_stage(schedule, c, d, stages): d for d in range(stages) for c in range(virtual)}
    return sum(
        1
        for d, (kinds, _, chunks) in enumerate(orders)
        for k, c in zip(kinds, chunks)
        if k == F and (vs := virtual_stage(schedule, c, d, stages)) > 0 and owner[vs - 1] != d
    )


def _zb_v(r: Result) -> None:
    """ZB-V against the authors' comparison (T_F = T_B = T_W, which the default backward = 2 x forward split in
    equal B and W gives): no device idles between its first and last op, activations as 1F1B's first stage,
    twice 1F1B's point-to-point volume; and the step's skew of (p-1) chunk forwards, derived here."""
    rows = []
    zero = value("pipeline_schedules.zb-v.bubble_rate_equal_times")
    memory = value("pipeline_schedules.zb-v.activation_vs_1f1b")
    volume = value("pipeline_schedules.zb-v.p2p_volume_vs_1f1b")
    for p, m in ZB_V:
        sim = simulate(p, m, "zb-v", virtual=2)
        spans = [max(t["end"]) - min(t["start"]) for t in sim.timeline]
        stage_rate = 1 - m * 3.0 / max(spans)  # the authors' bubble rate: 1 - (F+B+W) m / longest stage time
        r.claim(
            f"zb-v p={p} m={m}: bubble rate per the authors (longest stage) = published",
            stage_rate,
            zero,
            abs_tol=1e-12,
            formula="1 - (F+B+W)m / longest stage time, T_F = T_B = T_W",
        )
        r.claim(
            f"zb-v p={p} m={m}: bubble of the whole step = skew / step",
            sim.bubble_fraction,
            zb_v_bubble_fraction(p, m),
            rel_tol=1e-12,
            unit="fraction",
            formula="(p-1)f/2 / (m(f+b) + (p-1)f/2)",
        )
        one = simulate(p, m, "1f1b")
        r.claim(
            f"zb-v p={p} m={m}: every device's peak activations / 1F1B stage 0's = published",
            max(sim.peak_inflight) / one.peak_inflight[0],
            memory,
            rel_tol=1e-12,
        )
        r.claim(f"zb-v p={p} m={m}: every device holds the same (balanced memory)", min(sim.peak_inflight), p)
        ratio = p2p_sends("zb-v", p, m, 2) / p2p_sends("1f1b", p, m)
        r.claim(f"zb-v p={p} m={m}: point-to-point sends / 1F1B's = published", ratio, volume, rel_tol=1e-12)
        rows.append(
            [p, m, sim.step_time, sim.bubble_fraction, stage_rate, one.bubble_fraction, max(sim.peak_inflight), ratio]
        )
    r.table(
        "zb_v",
        [
            "p",
            "m",
            "step time",
            "bubble (whole step)",
            "bubble (longest stage, the authors')",
            "1F1B bubble",
            "peak in flight (every device)",
            "p2p sends / 1F1B's",
        ],
        rows,
        caption="ZB-V simulated op by op: two chunks per GPU in a V, backward split into equal B and W "
        "(T_F = T_B = T_W); times in units of one micro-batch forward through one stage.",
    )
    p, m = 4, 8
    sim = simulate(p, m, "zb-v", virtual=2)
    bubble = r.add("ex_zbv_bubble", sim.bubble_fraction, "fraction", f"zb-v bubble, p={p} m={m}")
    peak = r.add("ex_zbv_peak", sim.peak_inflight[0], "micro-batches", "zb-v peak in flight on every device")
    r.add("ex_zbv_step", sim.step_time, "", "zb-v step time")
    skew = r.add("ex_zbv_skew", (p - 1) * 0.5, "", "zb-v: the last device starts (p-1) chunk forwards late")
    r.claim(
        f"zb-v p={p} m={m}: skew printed = the last GPU's first op start - GPU 0's, read from the timeline",
        skew,
        min(sim.timeline[-1]["start"]) - min(sim.timeline[0]["start"]),
        rel_tol=1e-12,
    )
    # the pages state this example in words ("at p = 4, m = 8"): worked by hand there, 3 half-forwards of skew
    r.claim(
        "zb-v at p = 4, m = 8 (as the pages say): bubble printed = 1.5 / (8 x 3 + 1.5)",
        bubble,
        1.5 / 25.5,
        rel_tol=1e-12,
    )
    r.claim("zb-v at p = 4 (as the pages say): every GPU holds p = 4 micro-batches", peak, 4)


def _printed(form: str, **symbols: float) -> float:
    """Evaluate a bubble form as Table 2 prints it, "(PP/2-1)(F&B+B-3W)": F&B renamed FB, products written out
    ("3W" -> 3*W, ")(" -> ")*("), then only numbers, symbols, + - * / and brackets are allowed."""
    text = form.replace("F&B", "FB").replace(")(", ")*(")
    text = re.sub(r"(\d)([A-Z(])", r"\1*\2", text)
    names = sorted(symbols, key=len, reverse=True)
    for name in names:
        text = re.sub(rf"\b{name}\b", f"({float(symbols[name])!r})", text)
    if not re.fullmatch(r"[\d.()+\-*/ ]+", text):
        raise ValueError(f"unexpected symbol in the printed form {form!r}: {text!r}")
    return float(eval(text, {"__builtins__": {}}))  # only numbers and operators: checked above


def _table2(r: Result, p: int = 8, m: int = 32) -> None:
    """DeepSeek-V3's Table 2 (1F1B, ZB1P, DualPipe) in the units of the simulator (F = 1, full backward B = 2,
    W = 1): the 1F1B and ZB1P rows are simulated and compared with the printed forms; DualPipe's row is the
    printed form only (not simulated here), between perfect overlap (F&B = max(F, B)) and none (F&B = F + B)."""
    f, b, w = 1.0, 2.0, 1.0
    rows = []
    for name, schedule, printed in (  # the printed forms, evaluated
        ("1F1B", "1f1b", (p - 1) * (f + b)),
        ("ZB1P (ZB-H1)", "zb-h1", (p - 1) * (f + b - 2 * w)),
    ):
        sim = simulate(p, m, schedule)
        idle = sim.step_time - max(sim.busy)
        key = "one-f-one-b" if schedule == "1f1b" else "zb1p"
        r.claim(
            f"{name} p={p} m={m}: simulated idle per device = DeepSeek-V3 Table 2",
            idle,
            printed,
            rel_tol=1e-12,
            formula=str(value(f"pipeline_schedules.{key}.bubble")),
        )
        rows.append(
            [
                name,
                value(f"pipeline_schedules.{key}.bubble"),
                idle,
                printed,
                value(f"pipeline_schedules.{key}.parameter_copies"),
                sim.peak_inflight[0],
            ]
        )
    copies = value("pipeline_schedules.dualpipe.parameter_copies")
    extra = value("pipeline_schedules.dualpipe.activation_microbatches_extra")
    for label, fb in (("DualPipe, F&B = F + B (no overlap)", f + b), ("DualPipe, F&B = max(F, B)", max(f, b))):
        rows.append(
            [label, value("pipeline_schedules.dualpipe.bubble"), "—", (p / 2 - 1) * (fb + b - 3 * w), copies, p + extra]
        )
    for row, fb in ((rows[2], f + b), (rows[3], max(f, b))):
        r.claim(
            f"{row[0]} p={p}: idle = Table 2's printed form {row[1]}, parsed from the data and evaluated",
            row[3],
            _printed(row[1], PP=p, FB=fb, F=f, B=b, W=w),
            rel_tol=1e-12,
        )
    r.claim(
        f"DualPipe p={p}: Table 2's idle, even without overlap, is below ZB1P's simulated idle",
        rows[2][3],
        rows[1][2],
        relation="<=",
        formula="(PP/2-1)(F+B+B-3W) <= (PP-1)(F+B-2W)",
    )
    r.table(
        "table2",
        [
            "schedule",
            "idle per device (simulated)",
            "idle per device (Table 2)",
            "parameter copies",
            "activations (micro-batches)",
        ],
        rows,
        caption=f"PP = {p}, m = {m}; F = 1 (forward), B = 2 (full backward), W = 1 (its weight part). DualPipe is "
        "not simulated here: its row is Table 2's formula.",
    )
    r.add("t2_stages", p, "", "pipeline stages in the Table 2 comparison")
    r.add("t2_dualpipe_no_overlap", rows[2][3], "", "DualPipe idle per Table 2, no overlap")
    r.add("t2_1f1b", rows[0][3], "", "1F1B idle per Table 2")
    r.add("t2_zb1p", rows[1][3], "", "ZB1P idle per Table 2")
    r.add("t2_dualpipe_params", copies, "x", "DualPipe's parameter copies")
    stacks = ("pytorch", "megatron-core", "colossalai", "zb-megatron", "deepseek-dualpipe")
    r.table(
        "stacks",
        ["stack", "pipeline schedules it ships", "source"],
        [
            [
                value(f"pipeline_schedules.{k}.name"),
                value(f"pipeline_schedules.{k}.schedules"),
                fact(f"pipeline_schedules.{k}.schedules").source.citation(),
            ]
            for k in stacks
        ],
        caption="Transcribed from each stack's documentation or source (distlab/data/pipeline_schedules.toml).",
    )


def _p2p(r: Result, p: int = 8, m: int = 32) -> None:
    """Point-to-point time c: GPipe pays 2(p-1)c once; 1F1B's steady state is a loop through every
    stage and back, so it pays about 2(p-1)c/p per micro-batch as well. The realistic δ comes first."""
    rows = []
    split, whole = realistic_p2p(r, p)
    for c in (0.0, split, whole, 0.2, 0.5):
        base = (m + p - 1) * 3.0 + 2 * (p - 1) * c
        g, o = simulate(p, m, "gpipe", p2p=c), simulate(p, m, "1f1b", p2p=c)
        rows.append([c, g.step_time, base, o.step_time, o.step_time / base])
        r.claim(f"gpipe p={p} m={m} p2p={c:.3g}: step = (m+p-1)(F+B) + 2(p-1)δ", g.step_time, base, rel_tol=1e-12)
        r.claim(
            f"1f1b p={p} m={m} p2p={c:.3g}: step >= (m+p-1)(F+B) + 2(p-1)δ",
            o.step_time,
            base,
            relation=">=",
            rel_tol=1e-12,
        )
    r.table(
        "p2p",
        ["p2p time δ", "GPipe step", "(m+p-1)(F+B) + 2(p-1)δ", "1F1B step", "1F1B / formula"],
        rows,
        caption=f"p = {p}, m = {m}; times in units of one micro-batch forward.",
    )
    r.add("p2p_stages", p, "", "stages in the p2p table")
    r.add("p2p_microbatches", m, "", "micro-batches in the p2p table")
    shown = {
        0.5: r.add("p2p_1f1b_slowdown", rows[-1][4], "", f"1F1B step / formula at p2p = {rows[-1][0]}"),
        split: r.add("p2p_1f1b_slowdown_split", rows[1][4], "", "1F1B step / formula at the realistic δ"),
        whole: r.add("p2p_1f1b_slowdown_whole", rows[2][4], "", "... at δ with whole activations per rank"),
    }
    cost = r.add(
        "p2p_cost_split", rows[1][3] / rows[0][3] - 1, "fraction", "1F1B step longer than at δ = 0, realistic δ"
    )
    free = (m + p - 1) * 3.0  # 1F1B with free sends: (m+p-1)(F+B), worked by hand
    for c, ratio in shown.items():  # between the GPipe-like floor and free sends plus 2(p-1)δ/p per micro-batch
        hops = (m + p - 1) * 2 * (p - 1) * c / p
        formula = (m + p - 1) * 3.0 + 2 * (p - 1) * c
        r.claim(f"1F1B / formula at δ = {c:.3g} printed: at least 1", ratio, 1.0, relation=">=", rel_tol=1e-12)
        r.claim(
            f"1F1B / formula at δ = {c:.3g} printed: at most (free-send step + 2(p-1)δ/p per micro-batch) / formula",
            ratio,
            (free + hops) / formula,
            relation="<=",
            rel_tol=1e-12,
        )
    r.claim(
        "1F1B's extra time at the realistic δ printed: at most 2(p-1)δ/p per micro-batch of the free-send step",
        cost,
        (m + p - 1) * 2 * (p - 1) * split / p / free,
        relation="<=",
        rel_tol=1e-12,
    )
    r.claim("1F1B's extra time at the realistic δ printed: not negative", cost, 0.0, relation=">=")
    r.claim(
        "at the realistic δ, 1F1B's step is at most 2(p-1)δ/p per micro-batch longer than with free sends",
        rows[1][3] - rows[0][3],
        (m + p - 1) * 2 * (p - 1) * split / p,
        relation="<=",
        formula="every round of p micro-batches waits for 2(p-1) hops at most",
    )
    r.add("p2p_largest", rows[-1][0], "", "largest p2p time in the table")


def _big(r: Result) -> None:
    p, m = BIG
    sim = simulate(p, m, "1f1b")  # its wall time is the README's benchmark, not a page number: pages stay byte-stable
    r.add("big_stages", p, "", "stages of the large simulation")
    r.add("big_microbatches", m, "", "micro-batches of the large simulation")
    ops = r.add("big_ops", 2 * p * m, "ops", "ops simulated")
    r.claim(
        f"1f1b p={p} m={m}: ops printed = ops in the simulated timeline",
        ops,
        sum(len(t["kind"]) for t in sim.timeline),
    )
    r.add("big_bubble", sim.bubble_fraction, "fraction", "bubble of 1F1B at the large size")
    r.claim(
        f"1f1b p={p} m={m}: bubble = (p-1)/(m+p-1)",
        sim.bubble_fraction,
        bubble_fraction(p, m),
        rel_tol=1e-12,
        unit="fraction",
    )
    r.claim(f"1f1b p={p} m={m}: stage 0 holds p", sim.peak_inflight[0], p)


def _quantities(r: Result) -> None:
    """The numbers the prose quotes: the p = 4, m = 8 example and a 70B-style p = 8 pipeline."""
    p, m = 4, 8
    for schedule, v in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb-h1", 1)):
        sim = simulate(p, m, schedule, virtual=v)
        key = schedule.replace("-", "")
        r.add(f"ex_{key}_bubble", sim.bubble_fraction, "fraction", f"{schedule} bubble, p={p} m={m}")
        r.add(f"ex_{key}_peak", sim.peak_inflight[0], "micro-batches", f"{schedule} stage 0 peak in flight")
        r.add(f"ex_{key}_step", sim.step_time, "", f"{schedule} step time")
    # the same numbers worked by hand (F = 1, B = 2, W = 1 in ZB-H1) at the example the pages state in words
    # ("p = 4, m = 8"): idle per GPU over the step, and stage 0's peak
    hp, hm = 4, 8
    fill = {"gpipe": (hp - 1) * 3.0, "1f1b": (hp - 1) * 3.0, "interleaved": (hp - 1) * 3.0 / 2, "zb-h1": hp - 1.0}
    peak = {"gpipe": hm, "1f1b": hp, "interleaved": hp + (hp - 1) / 2, "zb-h1": hp}
    for schedule, idle in fill.items():
        key = schedule.replace("-", "")
        bubble, stage0 = r.quantities[f"ex_{key}_bubble"].value, r.quantities[f"ex_{key}_peak"].value
        r.claim(
            f"example p={hp} m={hm}, {schedule}: bubble printed = idle / (3m + idle), worked by hand",
            bubble,
            idle / (3.0 * hm + idle),
            rel_tol=1e-9,
            unit="fraction",
        )
        r.claim(f"example p={hp} m={hm}, {schedule}: stage 0's peak printed, worked by hand", stage0, peak[schedule])
    r.add("ex_stages", p, "", "stages in the example")
    r.add("ex_microbatches", m, "", "micro-batches in the example")
    for m in (8, 32, 128):
        shown = {
            "bubble": r.add(f"p8_m{m}_bubble", bubble_fraction(8, m), "fraction", f"1F1B bubble, p=8, m={m}"),
            "v4_bubble": r.add(
                f"p8_m{m}_v4_bubble", bubble_fraction(8, m, 4), "fraction", f"interleaved v=4 bubble, p=8, m={m}"
            ),
        }
        for key, schedule, v in (("bubble", "1f1b", 1), ("v4_bubble", "interleaved", 4)):
            r.claim(
                f"p8_m{m}_{key}: the page's closed form = the simulated {schedule} timeline at p = 8, v = {v}",
                shown[key],
                simulate(8, m, schedule, virtual=v).bubble_fraction,
                rel_tol=1e-9,
                unit="fraction",
            )


def _figures(r: Result) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p, m = 4, 8
    sims = [
        ("GPipe", simulate(p, m, "gpipe")),
        ("1F1B", simulate(p, m, "1f1b")),
        ("interleaved 1F1B, v = 2 (a, b: chunk)", simulate(p, m, "interleaved", virtual=2)),
        ("ZB-H1 (B: input gradient, W: weight gradient)", simulate(p, m, "zb-h1")),
        ("ZB-V (two chunks per GPU in a V; a, b: chunk)", simulate(p, m, "zb-v", virtual=2)),
    ]
    horizon = max(s.step_time for _, s in sims)
    fig, axes = plt.subplots(len(sims), 1, figsize=(9, 8.0), sharex=True)
    for ax, (title, sim) in zip(axes, sims):
        draw_timeline(ax, sim)
        ax.set_xlim(0, horizon)
        ax.set_title(
            f"{title}: step {sim.step_time:g}, bubble {sim.bubble_fraction:.1%}, "
            f"stage 0 holds {sim.peak_inflight[0]:g}",
            fontsize=8,
            loc="left",
        )
    axes[-1].set_xlabel("time (one micro-batch forward = 1)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[k]) for k in (F, B, W)]
    fig.legend(
        handles,
        ["forward", "backward (input gradient in ZB-H1)", "weight gradient"],
        loc="lower center",
        ncol=3,
        fontsize=7,
        bbox_to_anchor=(0.5, -0.02),
    )
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    r.figure(
        "timelines",
        fig,
        f"Simulated schedules for p = {p} stages and m = {m} micro-batches, backward = 2 x "
        "forward, no point-to-point time; numbers are micro-batches.",
    )

    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    ms = [8, 16, 32, 64, 128, 256]
    for label, schedule, v, marker in (
        ("GPipe / 1F1B", "1f1b", 1, "o"),
        ("interleaved v = 2", "interleaved", 2, "s"),
        ("interleaved v = 4", "interleaved", 4, "^"),
        ("ZB-H1", "zb-h1", 1, "D"),
    ):
        measured = [simulate(8, m, schedule, virtual=v).bubble_fraction for m in ms]
        ax.plot(ms, measured, marker, label=f"{label} (simulated)")
        closed = [zb_h1_bubble_fraction(8, m) if schedule == "zb-h1" else bubble_fraction(8, m, v) for m in ms]
        ax.plot(ms, closed, "-", color=ax.lines[-1].get_color(), linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("micro-batches m")
    ax.set_ylabel("bubble fraction of the step")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    r.figure(
        "bubble_vs_m", fig, "Bubble fraction against micro-batches for p = 8: simulated points, closed-form lines."
    )


def _picture_misreads(fig, sim, p: int, m: int, t_f: float, t_b: float) -> int:
    """The 1F1B drawing read back against the timeline and the hand-worked bubble: every op a box at its start, as
    long as the op, centred on its GPU's row; no idle box of zero width or over an op; on each row ops and idle
    boxes tile the step exactly (busy m(t_f + t_b), the rest idle); the title's percentage the rounded
    (p-1)/(m+p-1); rows one unit apart with as much blank above the first as below the last, each half the blank
    between two rows; no text too small or faint for a phone."""
    from distlab.core.drawing import legibility_problems

    ax = fig.axes[0]
    boxes = [(pt.get_gid() or "").partition(":")[::2] + (pt,) for pt in ax.patches]
    bad = 0
    for s in range(p):
        ops = sorted((pt.get_x(), pt.get_width()) for kind, st, pt in boxes if kind == "op" and st == str(s))
        want = sorted(
            zip(sim.timeline[s]["start"], (e - a for a, e in zip(sim.timeline[s]["start"], sim.timeline[s]["end"])))
        )
        bad += len(ops) != 2 * m or any(
            not math.isclose(x, a) or not math.isclose(w, d) for (x, w), (a, d) in zip(ops, want)
        )
        idle = [(pt.get_x(), pt.get_width()) for kind, st, pt in boxes if kind == "idle" and st == str(s)]
        bad += sum(w <= 1e-9 for _, w in idle)  # no empty idle box
        bad += sum(x < a + d - 1e-9 and a < x + w - 1e-9 for x, w in idle for a, d in ops)  # none over an op
        bad += not math.isclose(sum(w for _, w in ops), m * (t_f + t_b))
        bad += not math.isclose(sum(w for _, w in idle) + sum(w for _, w in ops), (m + p - 1) * (t_f + t_b))
    durations = {F: 1.0, B: 2.0}  # the axis and caption say it: one forward = 1, backward = 2 x forward
    bad += sum(
        not math.isclose(e - a, durations[k]) for t in sim.timeline for k, a, e in zip(t["kind"], t["start"], t["end"])
    )
    heights = {pt.get_height() for *_, pt in boxes}
    bad += len(heights) != 1 or not 0 < min(heights) < 1  # one height, rows that do not touch
    bad += sum(not math.isclose(pt.get_y() + pt.get_height() / 2, int(st)) for _, st, pt in boxes)  # centred on row
    height = min(heights)
    low, high = ax.get_ylim()  # y grows downwards: GPU 0 at the top
    gap = 1 - height
    bad += not math.isclose(-height / 2 - high, gap / 2) or not math.isclose(low - (p - 1 + height / 2), gap / 2)
    shown = re.search(r"(\d+)% of the step", ax.get_title(loc="left"))
    bad += shown is None or int(shown.group(1)) != round(100 * (p - 1) / (m + p - 1))
    return bad + len(legibility_problems(fig))


def _picture(r: Result) -> None:
    """The 1F1B drawing for the chapter's example (p = 4, m = 8), checked against the closed form: each GPU idles
    (p - 1)(t_f + t_b), a bubble of (p - 1)/(m + p - 1), counted from the boxes actually drawn."""
    from distlab.model_parallel.pipeline_picture import draw_pipeline

    p, m, t_f, t_b = 4, 8, 1.0, 2.0
    fig = draw_pipeline(simulate(p, m, "1f1b", forward=t_f, backward=t_b))
    drawn = [0.0] * p
    for patch in fig.axes[0].patches:
        kind, _, stage = (patch.get_gid() or "").partition(":")
        if kind == "idle":
            drawn[int(stage)] += patch.get_width()
    r.claim(
        f"1F1B drawing (p={p}, m={m}): idle time drawn on each GPU = (p-1)(t_f + t_b)",
        max(abs(x - (p - 1) * (t_f + t_b)) for x in drawn),
        0,
        abs_tol=1e-9,
        formula="the fill and drain of a 1F1B pipeline",
    )
    step = (m + p - 1) * (t_f + t_b)
    r.claim(
        f"1F1B drawing (p={p}, m={m}): bubble printed on it = (p-1)/(m+p-1)",
        sum(drawn) / (p * step),
        (p - 1) / (m + p - 1),
        rel_tol=1e-12,
        unit="fraction",
    )
    r.claim(
        f"1F1B drawing (p={p}, m={m}) read back: boxes off the timeline, empty or misplaced idle, title off the hand "
        "bubble, uneven margins, illegible text",
        _picture_misreads(fig, simulate(p, m, "1f1b", forward=t_f, backward=t_b), p, m, t_f, t_b),
        0,
    )
    r.figure(
        "one_f_one_b",
        fig,
        f"1F1B on {p} GPUs with {m} micro-batches, from the simulator's timeline (backward = 2 x forward): each GPU "
        f"runs up to p - 1 forwards ahead, then alternates one forward and one backward; the hatched boxes are the "
        "idle time the simulator leaves, the fill at the start and the drain at the end",
        kind="simulated",
    )
