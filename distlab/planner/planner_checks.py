"""Chapter 12's derived figures against the relations the page states and against work by hand: each share and
"slower" read back from the numbers printed beside it (the step is the sum of its causes, so a share is a cause
over that sum), the headroom illustration read back from the 70B table's own cells, the breakdown figure's bars
read back, and one layer's forward against its FLOPs from Llama 2 70B's config.json. Nothing here calls the cost
model; the numbers it checks come from the planner experiment's result.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

from distlab.core.facts import value
from distlab.core.results import Result, worst_relative_gap
from distlab.planner.config import Plan
from distlab.planner.worked_plan_checks import CONFIGS, budget, layer_params, model_params, plan_memory


def layer_forward_flops(tp: int, tokens: int, seq: int) -> float:
    """One Llama 2 70B layer's forward FLOPs on `tokens` tokens at tensor parallelism `tp`: 2 per weight per token
    (q and o h x h, k and v h x 1024, gate, up, down h x 28672) and causal attention's half of 4 s h per token."""
    h = CONFIGS["70B"]["hidden"]
    weights = layer_params("70B") - 2 * h  # the matmuls' weights: the block less its two RMSNorm weights
    return (2 * weights * tokens + 2 * seq * h * tokens) / tp


def share_of_step(breakdown: dict[str, float], part: str) -> float:
    """A cause's share of the step, the step taken as the sum of its causes (the planner claims they add up)."""
    return breakdown[part] / math.fsum(breakdown.values())


def gather_by_hand(tp: int, gpus: int, gpus_per_node: int) -> float:
    """One Llama 2 70B layer's all-gather over the data-parallel ranks, bandwidth term only: a ring moves (n-1)/n of
    the layer's bf16 weights at this TP through every rank, and across nodes its bandwidth is the NICs of the k ranks
    a node holds (chapter 9's rule; one InfiniBand NDR port per GPU)."""
    layer = 2 * layer_params("70B") / tp
    n, k = gpus // tp, gpus_per_node // tp
    nic = value("interconnect.InfiniBand-NDR.gbits_per_s_per_direction") * 1e9 / 8
    return (n - 1) / n * layer / (k * nic)


def check_zero3(r: Result, breakdown: dict[str, float], rate: float, seq: int, gpus: int, gpus_per_node: int):
    """The ZeRO-3 answer's numbers: its 'slower' against the two printed steps, its exposed share against its
    breakdown, one layer's forward against its FLOPs at the training matmul rate, and the page's 'it hides, just'."""
    q = {k: v.value for k, v in r.quantities.items()}
    ideal = layer_forward_flops(int(q["zero3_tp"]), int(q["zero3_micro_batch"]) * seq, seq) / rate
    r.add("zero3_forward_by_hand", ideal, "s", "one 70B layer's forward FLOPs (config.json) at the training rate")
    pairs = [
        (q["zero3_slower"], q["zero3_step"] / q["70b_step"] - 1),
        (q["zero3_exposed_dp"], share_of_step(breakdown, "exposed_dp")),
    ]
    r.claim(
        "70B ZeRO-3 without a pipeline: 'slower' = its step over the recommended one's, its exposed share = its "
        "exposed ZeRO time over the sum of its causes (largest relative gap)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-9,
    )
    r.claim(
        "70B ZeRO-3: one layer's forward lies between its matmul and attention FLOPs at the training rate and 1.3x "
        "that (partial waves, FlashAttention's lower rate, memory-bound work)",
        q["zero3_forward"] / ideal,
        1.15,
        abs_tol=0.15,
        formula="(2 x weights + 2 s h) x tokens / TP, Llama 2 70B's config.json",
    )
    r.claim(
        "70B ZeRO-3: one layer's gather fits inside that layer's forward (the page's 'it hides, just')",
        q["zero3_gather"],
        q["zero3_forward"],
        relation="<=",
        unit="s",
    )
    ring = gather_by_hand(int(q["zero3_tp"]), gpus, gpus_per_node)
    r.claim(
        "70B ZeRO-3: one layer's gather = its ring's bandwidth term plus at most 15 % of latency (NCCL's per-step "
        "latencies over 32 ranks)",
        q["zero3_gather"] / ring,
        1.075,
        abs_tol=0.075,
        formula="(n-1)/n x 2 B x layer weights / TP over k NDR ports of 400 Gb/s (k of the n ranks per node)",
    )


def check_fixed(r: Result, breakdown: dict[str, float], overlap_breakdown: dict[str, float]) -> None:
    """The fixed TP 8 plan's exposed TP shares, with and without overlap, against their breakdowns."""
    q = {k: v.value for k, v in r.quantities.items()}
    pairs = [
        (q["fixed_tp_share"], share_of_step(breakdown, "exposed_tp")),
        (q["fixed_tp_share_overlap"], share_of_step(overlap_breakdown, "exposed_tp")),
        (q["fixed_step_overlap"], math.fsum(overlap_breakdown.values())),
    ]
    r.claim(
        "70B fixed TP 8 plan: exposed TP shares = exposed TP time over the sum of the step's causes (largest gap)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-9,
    )


def check_fixed_compute(r: Result, flops_per_token: float, causal_attention: float, tokens: float, rate: float):
    """The fixed plan's ideal compute by chapter 2's flops_per_token (6N + 12Lhs) less the masked half of attention
    (6Lhs), a second derivation of the page's 6N + 6Lhs."""
    r.claim(
        "70B fixed plan: the ideal compute = chapter 2's 6N + 12Lhs less the masked 6Lhs, at the training rate",
        r.quantities["fixed_compute_by_hand"].value,
        (flops_per_token - causal_attention) * tokens / rate,
        rel_tol=1e-9,
        unit="s",
    )


def check_async_tp(r: Result) -> None:
    """The step speeds up by overlap, and less than the forward: backward has twice the matmuls to hide the same
    collectives behind, and the optimizer and data-parallel time do not change (as the published 20 % forward and
    8 % end-to-end)."""
    q = {k: v.value for k, v in r.quantities.items()}
    excess = [max(-q[f"async_tp_{k}_e2e"], q[f"async_tp_{k}_e2e"] - q[f"async_tp_{k}_forward"]) for k in ("70b", "8b")]
    r.claim(
        "async TP: 0 <= the step's speedup <= the forward's, for 70B and 8B (largest excess)",
        max(excess),
        0.0,
        relation="<=",
    )


def check_seventy_table(r: Result, breakdowns: list[dict[str, float]], ax) -> None:
    """The headroom paragraph's 'fills X (plan N)' read back from the 70B table's printed headroom column, and the
    breakdown figure's bars read back: each bar a cause of its plan, each starting where the previous ended."""
    q = {k: v.value for k, v in r.quantities.items()}
    printed = [float(row[3].rstrip("%")) / 100 for row in r.tables["seventy"].rows]
    rank = int(q["seventy_fullest_rank"])
    excess = [abs((1 - q["seventy_fullest_used"]) - printed[rank - 1]) - 5e-4, min(printed) - printed[rank - 1]]
    patches = [p for p in ax.patches]
    parts = list(breakdowns[0])
    for i, part in enumerate(parts):  # barh draws one container per cause, one bar per plan
        for j, b in enumerate(breakdowns):
            bar = patches[i * len(breakdowns) + j]
            left = math.fsum(b[p] for p in parts[:i])
            excess += [abs(bar.get_width() - b[part]) - 1e-9 * b[part], abs(bar.get_x() - left) - 1e-9 * left]
    excess.append(abs(len(patches) - len(parts) * len(breakdowns)))
    rows = r.tables["seventy"].rows  # the labels: the first is the recommended plan, "(fastest)" the least step
    steps = [row[4].value for row in rows]
    labels = [row[0] for row in rows]
    quickest = min(range(len(rows)), key=lambda i: steps[i])
    want = [
        f"{i + 1}" + (" (recommended)" if i == 0 else " (fastest)" if i == quickest else "") for i in range(len(rows))
    ]
    excess.append(sum(a != b for a, b in zip(labels, want, strict=True)))
    r.claim(
        "70B: the fullest plan's fill and place are the table's, and every bar of the breakdown figure is its cause "
        "at its place (largest excess over the printed rounding)",
        max(excess),
        0.0,
        relation="<=",
        abs_tol=1e-9,
    )


def check_caption_tokens(r: Result, tokens: int, sequences: int) -> None:
    """The examples caption's 'fine-tunes at N sequences' and 'pretraining at NM tokens' against what the rows ran."""
    said = re.search(
        r"fine-tunes at (\d+) sequences per step, pretraining at ([0-9.]+)M tokens", r.tables["examples"].caption
    )
    r.claim(
        "the pretraining batch is Llama 2's: 'a global batch-size of 4M tokens', to the digit the paper prints",
        tokens,
        value("scaling_laws.Llama2-70B.batch_tokens_million") * 1e6,
        rel_tol=0.125,
        formula="1024 sequences of 4096 tokens = 4,194,304; the paper's 4M spans 3.5M to 4.5M",
    )
    r.claim(
        "examples caption: its fine-tuning batch (sequences) and pretraining batch (M tokens, 2^20) are the rows'",
        worst_relative_gap(
            [(float(said[1]), sequences), (float(said[2]) * 2**20, tokens)] if said else [(math.nan, 1)]
        ),
        0.0,
        abs_tol=1e-9,
    )


def check_overlap_column(r: Result, breakdowns: list[dict[str, float]]) -> None:
    """The overlap table's "TP exposed" column: each plan's exposed TP seconds over the sum of its step's causes."""
    printed = [float(row[6].rstrip("%")) for row in r.tables["overlap"].rows]
    want = [round(100 * share_of_step(b, "exposed_tp"), 1) for b in breakdowns]
    r.claim(
        "overlap table: TP exposed = exposed TP time over the sum of the step's causes (worst gap, printed digit)",
        worst_relative_gap(list(zip(printed, want, strict=True))),
        0.0,
        abs_tol=1e-9,
    )


LABEL = (
    r"TP (\d+) x PP (\d+) x DP (\d+)(?: \(shard \d+ x replicate (\d+)\))?(?: x CP (\d+))?(?: x EP (\d+))?, "
    r"(?:DDP|ZeRO-(\d)), "
    r"micro-batch (\d+) x (\d+)(?:, (full|selective) recompute)?(?:, (offload optimizer(?: and params)?))?"
    r"(?:, (zb-h1|interleaved v=(\d+)))?$"
)


def read_label(text: str) -> Plan | None:
    """The plan a printed label names, read back field by field (None when it does not parse)."""
    m = re.fullmatch(LABEL, text)
    if m is None:
        return None
    tp, pp, dp, rep, cp, ep, zero, b, n, recompute, offload, schedule, v = m.groups()
    return Plan(
        tp=int(tp),
        pp=int(pp),
        dp=int(dp),
        cp=int(cp or 1),
        ep=int(ep or 1),
        dp_replicate=int(rep or 1),
        zero=int(zero or 0),
        micro_batch=int(b),
        microbatches=int(n),
        recompute=recompute or "none",
        offload={None: "none", "offload optimizer": "optimizer"}.get(offload, "params"),
        schedule="interleaved" if v else (schedule or "1f1b"),
        virtual=int(v or 1),
    )


def check_memory(r: Result, shown: dict[str, list], gpus_per_node: int) -> None:
    """Every memory and headroom cell of the examples, 70B and overlap tables, and the numbers the 70B "why" lines
    print, against each plan's bytes worked by hand (worked_plan_checks.plan_memory, from the models' config.json),
    at their printed digits. `shown` maps a table to its rows' (model, Plan, sequence length, GPUs, tokens per step)."""

    usable = budget("H100-SXM")
    pairs: list[tuple[float, float]] = []
    columns = {"examples": (4, 5, 3), "seventy": (2, 3, 1), "overlap": (2, 3, 1)}  # memory, headroom, label
    mislabeled = 0
    for table, plans in shown.items():
        mem_col, room_col, label_col = columns[table]
        for row, (model, plan, seq, *_) in zip(r.tables[table].rows, plans, strict=True):
            mislabeled += read_label(row[label_col]) != plan
            want = plan_memory(plan, seq, model)["device"]
            pairs += [
                (row[mem_col].value, want),
                (float(row[room_col].rstrip("%")), round(100 * (1 - want / usable), 1)),
            ]
    model, plan, seq, *_ = shown["seventy"][0]
    best = plan_memory(plan, seq, model)
    why = " ".join(row[0] for row in r.tables["why"].rows)
    found = re.search(
        r"Fits: ([\d.]+) GB of the ([\d.]+) GB usable per GPU \(weights ([\d.]+), gradients ([\d.]+), optimizer "
        r"([\d.]+), activations ([\d.]+), NCCL buffers ([\d.]+) GB.*Headroom ([\d.]+)% \(([\d.]+) GB free",
        why,
    )
    free = usable - best["device"]
    wants = [best["device"], usable, best["weights"], best["gradients"], best["optimizer"], best["activations"]]
    wants = [round(x / 1e9, 1) for x in wants] + [round((best["device"] - best["peak"]) / 1e9, 1)]
    wants += [round(100 * free / usable, 1), round(free / 1e9, 1)]
    pairs += zip([float(g) for g in found.groups()] if found else [math.nan] * len(wants), wants, strict=True)
    if plan.offload != "none":
        host = re.search(r"host memory ([\d,]+) GB per node of ([\d,]+) GB", why)
        node = value("host_links.DGX-H100-host.host_memory_tb") * 1000  # TB to GB: a DGX H100's host memory
        got = [float(g.replace(",", "")) for g in host.groups()] if host else [math.nan] * 2
        pairs += zip(got, [round(gpus_per_node * best["host"] / 1e9), node], strict=True)
    r.claim("chapter 12's plan labels, read back field by field, that do not name their plan", mislabeled, 0)
    r.claim(
        "chapter 12's memory, cell by cell (the examples, 70B and overlap tables, the 70B 'why' lines) = each plan's "
        "bytes worked by hand from its config.json: worst relative gap (percentages at their printed digit)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-9,
        formula="16 B/param by ZeRO stage; per layer (12h + 4kv + 8f + 8 + 4a) sb/t (Llama), (32h + 16 + 4a) sb/t "
        "(GPT-3)",
    )


RECOMPUTE_ORDER, OFFLOAD_ORDER = ("none", "selective", "full"), ("none", "optimizer", "params")


def expressible(plan) -> bool:
    """Plans worked_plan_checks.plan_memory can size by hand: no context or expert parallelism."""
    return plan.cp == 1 and plan.ep == 1


def kept_by_hand(plans: list, seq: int, model: str, usable: float, host_per_gpu: float, rule: float) -> set:
    """The plans a search keeps, decided with bytes worked by hand: those that fit (device bytes within the usable
    memory, host bytes within 90 % of the host's share), less each one a variant with less recomputation and less
    offload makes needless (it fits and leaves `rule` of the usable memory free)."""

    sized = {p: plan_memory(p, seq, model) for p in plans}
    fit = {p for p, mem in sized.items() if mem["device"] <= usable and mem["host"] <= 0.9 * host_per_gpu}

    def layout(p):
        return tuple(v for k, v in sorted(vars(p).items()) if k not in ("recompute", "offload"))

    def lighter(q, p) -> bool:  # q trades less: no more recomputation, no more offload, and not p itself
        less = RECOMPUTE_ORDER.index(q.recompute) <= RECOMPUTE_ORDER.index(p.recompute)
        return q != p and less and OFFLOAD_ORDER.index(q.offload) <= OFFLOAD_ORDER.index(p.offload)

    roomy = (1 - rule) * usable
    groups: dict[tuple, list] = {}
    for p in fit:
        groups.setdefault(layout(p), []).append(p)
    return {p for p in fit if not any(lighter(q, p) and sized[q]["device"] <= roomy for q in groups[layout(p)])}


def check_fit_sets(r: Result, requests: list[tuple[str, list, list, int, float, float]], rule: float) -> None:
    """Which plans fit, request by request: the search's kept plans (those plan_memory can size by hand) against the
    same candidates kept by bytes worked by hand. `requests` holds (model, candidates the stacks allow, the search's
    kept plans, sequence length, usable bytes, host bytes per GPU)."""
    from distlab.planner.search import VIRTUAL_CHUNKS
    from distlab.planner.stacks import allows

    misses = []
    for model, candidates, kept, seq, usable, host in requests:
        layers = CONFIGS[model]["layers"]
        sequences = {p.dp * p.micro_batch * p.microbatches for p in candidates}
        if len(sequences) != 1:  # every layout runs the request's one global batch
            misses.append(f"{model}: global batches {sorted(sequences)}")
        # a pipeline needs at least as many micro-batches as stages, and whole layers on every stage
        misses += [
            f"{model} layout: {p.label()}" for p in candidates if p.pp > 1 and (p.microbatches < p.pp or p.pp > layers)
        ]
        by_hand = {p for p in expand_by_hand(candidates, layers, VIRTUAL_CHUNKS) if allows("any", p, False)}
        misses += [
            f"{model} candidate: {p.label()}" for p in sorted(by_hand ^ set(candidates), key=lambda p: p.label())
        ]
        mine = kept_by_hand([p for p in candidates if expressible(p)], seq, model, usable, host, rule)
        theirs = {p for p in kept if expressible(p)}
        misses += [f"{model}: {p.label()}" for p in sorted(mine ^ theirs, key=lambda p: p.label())]
    r.claim(
        "the plans that fit, request by request (7B, 13B, 70B, 175B): the search's candidates against their "
        "layouts' schedules, recomputation and offload written out by hand, and the plans it keeps against the "
        "same candidates sized by hand with the headroom rule's pruning (plans in one set and not the other)",
        len(misses),
        0,
        formula="; ".join(misses[:5]),
    )


def check_why(r: Result, ranked: list, seq: int, tokens: int, gpus_per_node: int) -> None:
    """The 70B 'why' lines' other numbers at their printed digits: each share of the step against the breakdown's
    sum, the step, MFU and tokens/s against the 70B table and the step's tokens, the layout's numbers against the
    plan, the batch arithmetic, DDP's model state by hand (16 B per local parameter of the first stage, Llama 2 70B's
    config.json), the unsharded ZeRO-1 plan's bytes by hand, the heads and FFN width against config.json, and the
    runner-up against the 70B table's own row (its place, its 'slower' from the printed steps, its headroom)."""

    best, cfg, usable = ranked[0], CONFIGS["70B"], budget("H100-SXM")
    p, parts = best.plan, best.time.breakdown.as_dict()
    why = " ".join(row[0] for row in r.tables["why"].rows)
    pairs: list[tuple[float, float]] = []

    def said(pattern: str, wants: list[float]) -> None:
        found = re.search(pattern, why)
        got = [float(g.replace(",", "")) for g in found.groups()] if found else [math.nan] * len(wants)
        pairs.extend(zip(got, wants, strict=True))

    def pct(part: str, digits: int = 1) -> float:
        return round(100 * share_of_step(parts, part), digits)

    h, f, layers, v = cfg["hidden"], cfg["ffn"], cfg["layers"], cfg["vocab"]
    stage0 = (-(-layers // p.pp) * layer_params("70B") + v * h) / p.tp
    dp = p.dp * p.pp  # the rule's pipeline-free plan: ZeRO-1, one sequence per micro-batch, no recomputation
    flat = plan_memory(Plan(tp=p.tp, dp=dp, zero=1, micro_batch=1, microbatches=tokens // (dp * seq)), seq, "70B")
    said(r"divide the (\d+) heads, (\d+) KV heads and FFN width (\d+)", [cfg["heads"], cfg["kv"] // 128, f])
    said(
        r"at TP (\d+) ZeRO-1 without one needs ([\d.]+) GB of ([\d.]+)",
        [p.tp, round(flat["device"] / 1e9), round(usable / 1e9, 1)],
    )
    said(
        r"Tensor parallelism (\d+) stays inside one (\d+)-GPU .* leave ([\d.]+)% of the step exposed",
        [p.tp, gpus_per_node, pct("exposed_tp")],
    )
    said(
        r"(\d+) pipeline stages, the \S+ schedule, (\d+) micro-batches each: the bubble is ([\d.]+)%",
        [p.pp, p.microbatches, pct("pipeline_bubble")],
    )
    said(r"model state alone would be ([\d.]+) GB per GPU", [round(16 * stage0 / 1e9, 1)])
    ddp = replace(p, zero=0, offload="none", dp_replicate=1)
    too_big = 16 * stage0 + plan_memory(ddp, seq, "70B")["activations"] > usable  # the line's "more than fits"
    pairs.append((float(("more than fits" if too_big else "it would fit, but no faster") in why), 1.0))
    full, causal = model_flops_per_token("70B", seq), model_flops_per_token("70B", seq, causal=True)
    causal_line = full / causal > 1.05  # the page: both printed when they differ by more than 5 %
    pairs.append((float("Counting only that half" in why), float(causal_line)))
    said(
        r"Data parallelism (\d+) with ZeRO-(\d).*?leaves ([\d.]+)% of the step exposed",
        [p.dp, p.zero, pct("exposed_dp")],
    )
    said(
        r"Micro-batch of (\d+) sequence\(s\), (\d+) accumulated per step: (\d+) sequences = ([\d,]+) tokens",
        [p.micro_batch, p.microbatches, tokens // seq, tokens],
    )
    if p.offload != "none":
        said(r"cost ([\d.]+)% of the step", [pct("offload")])
    said(
        r"Step ([\d.]+) s: compute (\d+)%; MFU ([\d.]+)%.*?, ([\d,]+) tokens/s",
        [
            float(f"{best.step_seconds:.3g}"),
            pct("compute", 0),
            round(100 * best.time.mfu, 1),
            round(tokens / best.step_seconds),
        ],
    )
    if "seventy_unrestricted_faster" in r.quantities:
        said(r"would be ([\d.]+)% faster", [round(100 * r.quantities["seventy_unrestricted_faster"].value, 1)])
    runner = re.search(r"Runner-up: (.*?), ([\d.]+)% slower \(mostly ([a-z ]+); headroom ([\d.]+)%\)", why)
    rows = {row[1]: row for row in r.tables["seventy"].rows}
    row = rows.get(runner[1]) if runner else None
    if runner and row is not None:
        step0 = r.tables["seventy"].rows[0][4].value
        pairs += [
            (float(runner[2]), round(100 * (row[4].value / step0 - 1), 1)),
            (float(runner[4]), float(row[3].rstrip("%"))),
        ]
        other = next(e for e in ranked if e.plan.label() == runner[1]).time.breakdown.as_dict()
        most = max(parts, key=lambda k: other[k] - parts[k]).replace("_", " ")
        pairs.append((float(runner[3] == most), 1.0))
    else:
        pairs.append((math.nan, 0.0))
    r.claim(
        "70B 'why' lines: shares, step, MFU, tokens/s, layout, batch, DDP's state and the runner-up, each against its "
        "reference at the printed digit (worst relative gap)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-9,
        formula="a share = its cause over the sum of the step's causes; 16 B x (L/p layers + embedding) / t",
    )


def model_flops_per_token(model: str, seq: int, causal: bool = False) -> float:
    """6N + 12Lhs (chapter 2's convention), or 6N + 6Lhs counting causal attention as half; N by hand."""
    c = CONFIGS[model]
    return 6 * model_params(model, seq) + (6 if causal else 12) * c["layers"] * c["hidden"] * seq


def mfu_and_band(
    model: str, seq: int, tokens_per_s: float, gpus: int, chip: str = "H100-SXM"
) -> tuple[float, float, float]:
    """(MFU, band low, band high) of a run: 6N + 12Lhs x tokens/s over GPUs x the datasheet's dense bf16 peak, the
    band MFU / (1 + the largest and smallest error on published runs)."""
    peak = value(f"gpus.{chip}.bf16_dense_tflops") * 1e12
    mfu = model_flops_per_token(model, seq) * tokens_per_s / (gpus * peak)
    e_min, e_max = value("planner.mfu-band.error_min"), value("planner.mfu-band.error_max")
    return mfu, mfu / (1 + e_max), mfu / (1 + e_min)


def check_throughput_cells(r: Result, rows: dict[str, list]) -> None:
    """Every tokens/s and MFU (band) cell of the examples, 70B and overlap tables: tokens/s = the step's tokens over
    its printed step; MFU = (6N + 12 L h s) x tokens/s / (GPUs x the datasheet's dense bf16 peak), N from config.json
    (chapter 2's convention); the band = MFU / (1 + the largest and smallest error on published runs).
    `rows` maps a table to its rows' (model, Plan, sequence length, GPUs, tokens per step), as check_memory's."""
    columns = {"examples": (6, 7, 8), "seventy": (4, 5, None), "overlap": (4, 5, None)}  # step, MFU, tokens/s
    pairs: list[tuple[float, float]] = []
    for table, shapes in rows.items():
        step_col, mfu_col, tps_col = columns[table]
        for row, (model, _, seq, gpus, tokens) in zip(r.tables[table].rows, shapes, strict=True):
            rate = tokens / row[step_col].value
            if tps_col is not None:
                pairs.append((float(row[tps_col].replace(",", "")), round(rate)))
            mfu, low, high = mfu_and_band(model, seq, rate, gpus)  # every request here runs on H100 SXMs
            found = re.fullmatch(r"([\d.]+)% \((\d+)%-(\d+)%\)", row[mfu_col])
            got = [float(g) for g in found.groups()] if found else [math.nan] * 3
            want = [round(100 * mfu, 1), round(100 * low), round(100 * high)]
            pairs += zip(got, want, strict=True)
    r.claim(
        "tokens/s and MFU (band) cells of the examples, 70B and overlap tables against the printed steps, "
        "6N + 12Lhs with N from config.json and the datasheet's peak (worst relative gap at the printed digit)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-9,
        formula="MFU = (6N + 12 L h s) tokens/s / (GPUs x peak); band = MFU / (1 + e)",
    )


def check_scalars(r: Result, requests: dict[str, tuple[int, int, int]]) -> None:
    """The single figures the prose quotes: each request's MFU and band against 6N + 12Lhs over its step (N by hand,
    the datasheet's peak), the 70B plan's layout, step, memory and headroom against its table row and bytes by hand,
    the fixed plan's MFU and tokens/s over its step, the long-context MFUs' ratio against (6N + 6Lhs)/(6N + 12Lhs).
    `requests` maps a request ("7b", "70b", "fixed", "long") to its step's (tokens, GPUs, sequence length)."""
    q = {k: v.value for k, v in r.quantities.items()}
    model = {"7b": "7B", "70b": "70B", "fixed": "70B", "long": "7B"}
    pairs: list[tuple[float, float]] = []
    for key in ("7b", "70b", "fixed"):
        tokens, gpus, seq = requests[key]
        mfu, low, high = mfu_and_band(model[key], seq, tokens / q[f"{key}_step"], gpus)
        pairs += [(q[f"{key}_mfu"], mfu), (q[f"{key}_mfu_low"], low), (q[f"{key}_mfu_high"], high)]
    pairs.append((q["fixed_tokens_per_second"], requests["fixed"][0] / q["fixed_step"]))
    seq = requests["long"][2]
    ratio = model_flops_per_token("7B", seq, causal=True) / model_flops_per_token("7B", seq)
    e_min, e_max = value("planner.mfu-band.error_min"), value("planner.mfu-band.error_max")
    pairs += [(q["long_mfu_causal"] / q["long_mfu"], ratio)]
    pairs += [(q["long_mfu_causal_low"], q["long_mfu_causal"] / (1 + e_max))]
    pairs += [(q["long_mfu_causal_high"], q["long_mfu_causal"] / (1 + e_min))]
    first = r.tables["seventy"].rows[0]
    layout = re.match(r"TP (\d+) x PP (\d+) x DP \d+, ZeRO-(\d)", first[1])
    got = [float(g) for g in layout.groups()] if layout else [math.nan] * 3
    pairs += zip(got, [q["seventy_tp"], q["seventy_pp"], q["seventy_zero"]], strict=True)
    usable = budget("H100-SXM")
    pairs += [(q["70b_step"], first[4].value), (q["seventy_usable"], usable), (q["70b_memory"], first[2].value)]
    pairs.append((q["seventy_headroom"], 1 - first[2].value / usable))
    r.claim(
        "the prose's MFUs, bands, 70B layout, step, memory and headroom, the fixed plan's throughput and the "
        "long-context ratio against their references (worst relative gap)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-9,
        formula="MFU = (6N + 12Lhs) tokens / (step x GPUs x peak); band = MFU / (1 + e)",
    )


def expand_by_hand(candidates: list, layers: int, chunks: tuple[int, ...]) -> set:
    """Every plan of the candidates' layouts (TP, PP, DP, CP, EP, ZeRO, micro-batches, replicas), with the schedule,
    recomputation and offload written out by hand: 1F1B; with a pipeline also ZB-H1, and the interleaved schedule at
    each chunk count whose chunks hold whole layers when the micro-batches split evenly over the stages; no or full
    recomputation (FlashAttention keeps no scores); no offload, the optimizer's from ZeRO-1 on, the parameters' too
    with ZeRO-3 and no pipeline; and no ZeRO stage without a group to shard over unless it offloads."""
    fields = ("tp", "pp", "dp", "cp", "ep", "zero", "micro_batch", "microbatches", "dp_replicate")
    out = set()
    for layout in {tuple(getattr(p, k) for k in fields) for p in candidates}:
        shape = dict(zip(fields, layout, strict=True))
        pp, zero, n = shape["pp"], shape["zero"], shape["microbatches"]
        scheds = [("1f1b", 1)]
        if pp > 1:
            scheds += [("zb-h1", 1)]
            scheds += [("interleaved", v) for v in chunks if n % pp == 0 and layers % (pp * v) == 0]
        offloads = ["none"] + (["optimizer"] if zero >= 1 else []) + (["params"] if zero == 3 and pp == 1 else [])
        for schedule, v in scheds:
            for recompute in ("none", "full"):
                for offload in offloads:
                    if shape["dp"] * shape["cp"] == 1 and zero > 0 and offload == "none":
                        continue
                    out.add(Plan(**shape, recompute=recompute, offload=offload, schedule=schedule, virtual=v))
    return out


def fused_gpt_layer_bytes(tokens: int, hidden: int, ffn: int, tp: int) -> tuple[float, float]:
    """(forward, backward) bytes of a GPT layer's memory-bound kernels as Megatron fuses them, by hand: LayerNorm,
    biased linears, GeLU, FlashAttention, no dropout, sequence parallelism (r = T / tp residual rows), bf16 tensors
    and fp32 row statistics (mean and rstd: 8 B a row). Forward: two norms read x and write y (4 B x r h each) and
    keep their statistics; two bias + add read the GEMM output and the residual and write the sum (6 B x r h each);
    bias + GeLU reads and writes the f/tp-wide activation (4 B x T f). Backward: each norm reads dy and x and writes
    dx (6 B x r h) and reads its statistics; autograd adds two gradients at the two residual joins (6 B x r h each);
    GeLU's backward reads dy and its input and writes dx (6 B x T f); the bias gradients sum q, k, v (3h/tp), the
    MLP's f/tp and twice h over rows (2 B each); the q, k, v split's concatenation reads and writes 3h/tp x 2 B."""
    r, qkv, f = tokens / tp, 3 * hidden / tp, ffn / tp
    forward = 2 * (4 * r * hidden + 8 * r) + 2 * 6 * r * hidden + 4 * tokens * f
    backward = 2 * (6 * r * hidden + 8 * r) + 2 * 6 * r * hidden + 6 * tokens * f
    backward += 2 * (tokens * (qkv + f) + 2 * r * hidden) + 4 * tokens * qkv
    return forward, backward


def check_nvl72_rows(r: Result, rows: list[tuple[Plan, int, int]], chip: str) -> None:
    """nvl72-plan's table: each plan's label read back, its memory against plan_memory by hand (GPT-3 175B from
    Brown et al.'s Table 2.1) and its headroom against the usable memory by hand, its MFU and band against
    6N + 12Lhs over its printed step at the datasheet's peak, and the GPT layer's memory-bound bytes Megatron's fused
    kernels move (block_bytes) against the count by hand, at each TP degree the table shows; Megatron's loss against
    its kernels' bytes per logit by hand (kernels_checks.MEGATRON_LOSS). `rows`: (plan, sequence, GPUs) per row."""
    from distlab.core.facts import quoted
    from distlab.gpu.block_bytes import LayerSpec, layer_bytes, loss_bytes_per_logit
    from distlab.planner.kernels_checks import MEGATRON_LOSS
    from distlab.planner.memory_quotes import quoted as memory_quoted

    c = CONFIGS["175B"]
    pairs: list[tuple[float, float]] = []
    mislabeled = 0
    # usable: the GPU's memory as MLPerf's system description prints it, less the 5 % fragmentation the planner
    # assumes and the CUDA context as measured
    capacity = quoted(f"gpus.{chip}.hbm_gb", r"accelerator_memory_capacity ([0-9]+) GB") * 1e9
    usable = capacity * (1 - 0.05) - memory_quoted("planner.memory-reserve.cuda_context_mib") * 2**20
    for row, (plan, seq, gpus) in zip(r.tables["plans"].rows, rows, strict=True):
        mislabeled += read_label(row[2]) != plan
        pairs.append((row[3].value, plan_memory(plan, seq, "175B")["device"]))
        pairs.append((float(row[4].rstrip("%")), round(100 * (1 - row[3].value / usable), 1)))
        mfu, low, high = mfu_and_band("175B", seq, gpus * seq / row[5].value, gpus, chip)
        found = re.fullmatch(r"([\d.]+)% \((\d+)%-(\d+)%\)", row[6])
        got = [float(g) for g in found.groups()] if found else [math.nan] * 3
        pairs += zip(got, [round(100 * mfu, 1), round(100 * low), round(100 * high)], strict=True)
        tokens = plan.micro_batch * seq
        spec = LayerSpec(
            tokens=tokens,
            seq=seq,
            hidden=c["hidden"],
            ffn=c["ffn"],
            heads=c["heads"],
            kv_heads=c["heads"],
            tp=plan.tp,
            sequence_parallel=True,
        )
        pairs += zip(layer_bytes("fused", spec), fused_gpt_layer_bytes(tokens, c["hidden"], c["ffn"], plan.tp))
    pairs += zip(loss_bytes_per_logit("megatron-fp32"), MEGATRON_LOSS)
    r.claim(
        "the NVL72 plans' labels, memory, headroom, MFU (band) and the fused GPT layer's and Megatron loss's bytes "
        "by hand "
        f"(worst relative gap; labels that do not read back: {mislabeled})",
        worst_relative_gap(pairs) + mislabeled,
        0.0,
        abs_tol=1e-9,
        formula="plan_memory by hand; MFU = (6N + 12Lhs) tokens/s / (GPUs x peak); fused bytes per kernel by hand",
    )
