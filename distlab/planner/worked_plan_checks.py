"""Chapter 14's numbers worked by hand: every plan's memory per GPU, the budget, the tables' cells and the numbers
the "why" lines print, from Llama 2 7B's config as typed in distlab.memory.activation_checks, the sources' quoted
sentences (the A100's NVML total, NCCL's buffer sizes, the fused loss's bytes per logit) and the closed forms the
chapters derive: 16 bytes per parameter sharded by stage, Korthikanti et al.'s saved bytes per layer with
FlashAttention, their p + (p - 1)/v micro-batches in flight on an interleaved pipeline's first stage. Nothing here
calls distlab.planner.memory.

The step times and MFUs come from the cost model (chapter 13 judges it against published runs); here the page's
words about them are read back against the experiment's own figures.
"""

from __future__ import annotations

import math
import re

from distlab.core.facts import value
from distlab.core.results import Result, worst_relative_gap
from distlab.memory.activation_checks import LLAMA2_7B
from distlab.planner.config import FRAGMENTATION_FRACTION, Plan
from distlab.planner.kernels import MEMORY_EFFICIENCY
from distlab.planner.memory_quotes import A100_MIB, FUSED_LOSS_GRADIENT, nccl_by_hand, quoted

# each strategy's layout as its name states it: (tp, pp, zero, offloads)
NAMED = {
    "DDP": (1, 1, 0, False),
    "ZeRO-1": (1, 1, 1, False),
    "ZeRO-2": (1, 1, 2, False),
    "ZeRO-3 / FSDP": (1, 1, 3, False),
    "ZeRO-3 + CPU offload": (1, 1, 3, True),
    "TP 8 (no ZeRO)": (8, 1, 0, False),
    "TP 2 x ZeRO-3": (2, 1, 3, False),
    "PP 4 x DP 2, ZeRO-1": (1, 4, 1, False),
}


def params() -> int:
    """Llama 2 7B's parameters by hand (model_params; no learned positions, so no sequence length)."""
    return model_params("7B", 0)


# the models chapter 12 plans for: the Llama 2s from their released config.json (hidden_size, num_attention_heads,
# num_key_value_heads x head dim 128, intermediate_size, num_hidden_layers, vocab_size; 7B's from LLAMA2_7B), and
# GPT-3 175B from Brown et al. 2020, Table 2.1 (96 layers, d_model 12288, 96 heads, context 2048; the feed-forward
# 4 x d_model) with GPT-2's vocabulary of 50257 and learned positions, the embedding tied to the output
CONFIGS: dict[str, dict[str, int]] = {
    "7B": {**LLAMA2_7B, "kv": LLAMA2_7B["hidden"]},
    "13B": {"layers": 40, "hidden": 5120, "heads": 40, "kv": 40 * 128, "ffn": 13824, "vocab": 32000},
    "70B": {"layers": 80, "hidden": 8192, "heads": 64, "kv": 8 * 128, "ffn": 28672, "vocab": 32000},
    "175B": {"layers": 96, "hidden": 12288, "heads": 96, "kv": 12288, "ffn": 4 * 12288, "vocab": 50257},
    # Mixtral 8x7B: MixtralConfig's defaults as transformers prints them (moe_models.toml, mixtral-hf-config), each
    # expert a SwiGLU of intermediate_size, top-2 of 8; the context of 32,768 from the paper's Table 1
    "Mixtral-8x7B": {
        "layers": 32,
        "hidden": 4096,
        "heads": 32,
        "kv": 8 * 128,
        "ffn": 14336,
        "vocab": 32000,
        "experts": 8,
        "top_k": 2,
        "seq": 32768,
    },
}
GPT_BLOCKS = {"175B"}  # LayerNorm, biases, a GeLU MLP, tied embedding and learned positions; the rest are Llama's


def layer_params(model: str) -> int:
    """One block's parameters. Llama: q, o (h x h), k, v (h x kv), gate, up, down (h x f), two RMSNorm weights.
    GPT: q, k, v and o with biases (4h^2 + 4h), the MLP's two matrices with biases (2hf + f + h), two LayerNorms'
    weights and biases (4h). Mixtral: Llama's attention and norms, E experts of three h x f matrices and the router
    (h x E)."""
    c = CONFIGS[model]
    h, kv, f = c["hidden"], c["kv"], c["ffn"]
    if model in GPT_BLOCKS:
        return 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h
    experts = c.get("experts", 0)
    if experts:
        return 2 * h * h + 2 * h * kv + experts * 3 * h * f + h * experts + 2 * h
    return 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h


def edge_params(model: str, seq: int, first: bool, last: bool, pp: int) -> int:
    """What the first and last stages hold beyond their blocks. Llama: the embedding (V x h); the final RMSNorm and
    the untied head. GPT: the token and learned position embeddings (V x h + s x h); the final LayerNorm (2h), and the
    tied head's own copy of the embedding when it sits on another stage (Megatron keeps one on the last stage)."""
    c = CONFIGS[model]
    h, v = c["hidden"], c["vocab"]
    if model in GPT_BLOCKS:
        return (v * h + seq * h if first else 0) + (2 * h + (v * h if pp > 1 else 0) if last else 0)
    return (v * h if first else 0) + (h + v * h if last else 0)


def model_params(model: str, seq: int) -> int:
    """A model's parameters by hand: its blocks and both ends, the tied head once (`seq`: GPT's learned positions)."""
    return CONFIGS[model]["layers"] * layer_params(model) + edge_params(model, seq, True, True, 1)


def budget(chip: str = "A100-SXM-80GB") -> float:
    """Usable bytes of an 80 GB part: NVML's total (MiB, as its source prints it) less the fragmentation margin and
    the CUDA context."""
    path = f"planner.capacity-{chip}.reported_mib"
    capacity = quoted(path, A100_MIB if chip == "A100-SXM-80GB" else "") * 2**20
    return capacity * (1 - FRAGMENTATION_FRACTION) - quoted("planner.memory-reserve.cuda_context_mib") * 2**20


def plan_memory(plan, seq: int, model: str = "7B") -> dict[str, float]:
    """One plan's bytes per GPU on its fullest pipeline stage (the first, with the embedding and the most
    micro-batches in flight, or the last, with the head and the logits), Megatron's defaults: mixed AdamW (2 + 2 +
    12 bytes per parameter, ZeRO sharding them by stage over DP; under a pipeline ZeRO-3 keeps its stage gathered,
    ZeRO-1's memory and two layers' gather buffers; offload moves the optimizer state, and from ZeRO-2 on the
    gradients, to the host, and parameter offload ZeRO-3's weight shard; hybrid sharding shards inside a replica),
    FlashAttention with sequence parallelism under TP, the fused vocab-parallel loss, gradients accumulating across
    micro-batches. A model of CONFIGS; a split that is not even gives the first stages the extra layers.

    Context parallelism: each GPU holds seq / cp tokens of every sequence, and its model state is sharded over the
    dp x cp ranks (CP ranks hold the same weights). Experts (Mixtral): a GPU holds E / ep experts of each layer, each
    split by TP, and their state is sharded over the dp x cp / ep ranks that hold the same experts; the router is
    whole on every GPU; a token's activations are those of a dense layer whose MLP is top_k experts wide (the
    planner's stated simplification, distlab.planner.moe)."""
    cfg = CONFIGS[model]
    h, f, v, layers, a, kv = (cfg[k] for k in ("hidden", "ffn", "vocab", "layers", "heads", "kv"))
    tp, pp, dp, cp, ep, b = plan.tp, plan.pp, plan.dp, plan.cp, plan.ep, plan.micro_batch
    experts = cfg.get("experts", 0)
    router = h * experts
    block = layer_params(model) - experts * 3 * h * f - router  # an MoE's attention and norms; a dense whole block
    routed = experts // ep * 3 * h * f // tp  # one layer's experts on this GPU
    f = f * cfg.get("top_k", 1)  # the width a token's MLP activations take
    zero = 1 if plan.zero == 3 and pp > 1 else plan.zero
    sb = seq // cp * b
    if model in GPT_BLOCKS:
        # Korthikanti et al. 2022, Table 2 with sequence parallelism and no score matrix (FlashAttention): 34 sbh
        # less the two 1-byte dropout masks (sbh each; the planner trains without dropout), plus the two
        # LayerNorms' fp32 mean and 1/std (2 x 2 x 4sb)
        rebuilt = (34 * h - 2 * h + 16) * sb / tp
    else:
        # the two norms' inputs, the q/k/v projections' input, q, O and the gate/up input (6 x 2sbh), k and v
        # (2 x 2 sb kv), the SiLU's input and output, up and down's input (4 x 2sbf), the norms' fp32 1/rms (2 x 4sb)
        rebuilt = (12 * h + 4 * kv + 8 * f + 8) * sb / tp
    # with FlashAttention's fp32 log-sum-exp (4 a s b); all split over TP with sequence parallelism
    flash = rebuilt + 4 * a * sb / tp
    per_layer, working = (flash, 0.0) if plan.recompute == "none" else (2 * h * sb / tp, rebuilt)
    fwd_logit = quoted("memory_buffers.loss-fused.forward_bytes_per_logit")
    bwd_logit = quoted("memory_buffers.loss-fused.forward_bytes_per_logit", FUSED_LOSS_GRADIENT)
    # the layer computing, the prefetched
    gather = 2 * 2 * (math.ceil(block / tp) + router + routed) if plan.zero == 3 else 0.0
    # one communicator per group a GPU joins: TP, PP, the gradient group dp x cp, CP's ring, EP, HSDP's replicas
    comm = nccl_by_hand() * sum(1 for n in (tp, pp, dp * cp, cp, ep, plan.dp_replicate) if n > 1)
    group = dp * cp // plan.dp_replicate  # hybrid sharding: ZeRO shards inside one replica

    def states(n: int, ranks: int) -> tuple[float, float, float, float]:
        """bf16 weights, bf16 gradients, fp32 master and moments, host bytes of `n` parameters over `ranks`."""
        shard = math.ceil(n / ranks)
        weights = 0.0 if plan.offload == "params" else 2 * (shard if zero == 3 else n)
        # offloaded, ZeRO-2 and 3 stream the reduced gradient shard to the host; ZeRO-1 accumulates them whole here
        grads = 0.0 if plan.offload != "none" and zero >= 2 else 2 * (shard if zero >= 2 else n)
        opt = 0.0 if plan.offload != "none" else 12 * (shard if zero >= 1 else n)
        # the host: fp32 master and moments, the bf16 gradient shard; with parameter offload the bf16 weights too
        host = (12 + 2 + (2 if plan.offload == "params" else 0)) * shard if plan.offload != "none" else 0.0
        return weights, grads, opt, host

    stages = []
    for stage in sorted({0, pp - 1}):
        first, last = stage == 0, stage == pp - 1
        here = -(-layers // pp) if first else layers // pp  # an uneven split gives the first stages one layer more
        local = math.ceil((here * block + edge_params(model, seq, first, last, pp)) / tp) + here * router
        dense, own = states(local, group), states(here * routed, max(1, group // ep))
        weights, grads, opt, host = (x + y for x, y in zip(dense, own, strict=True))
        if pp == 1:
            in_flight = 1.0
        elif plan.schedule == "interleaved":  # the warm-up's 2(p - s - 1) + (v - 1)p chunks and the one computing
            in_flight = min((2 * (pp - stage - 1) + (plan.virtual - 1) * pp + 1) / plan.virtual, plan.microbatches)
        else:  # 1F1B and ZB-H1: p - s micro-batches
            in_flight = min(pp - stage, plan.microbatches)
        acts = per_layer * here * in_flight
        logits = sb * v / tp if last else 0.0
        accumulated = grads if plan.microbatches > 1 else 0.0  # gradients accumulate from the first micro-batch on
        held = weights + opt + gather
        freed = per_layer * (here - 1) / plan.virtual  # backward's end: this micro-batch's layers but the first freed
        phases = {
            "forward": held + accumulated + acts + fwd_logit * logits,
            "loss": held + accumulated + acts + (fwd_logit + bwd_logit) * logits,
            "layer": held + accumulated + acts + working,
            "end": held + grads + acts - min(freed, acts) + working,
            "step": weights + opt + grads,
        }
        peak = max(phases.values())
        stages.append(
            {
                "weights": weights,
                "gradients": grads,
                "optimizer": opt,
                "activations": acts,
                "peak": peak,
                "device": peak + comm,
                "host": host,
            }
        )
    return max(stages, key=lambda st: st["device"])


def _percent(text: str) -> float:
    return float(text.split("%")[0]) / 100


def check(r: Result, plans: dict, seq: int, sequences: int, rule: float) -> None:
    """Chapter 14's memory and the tables' cells against plan_memory; `plans` is the strategy table's
    {name: (plan, memory, estimate or None)}, `rule` the headroom rule's fraction."""
    q = {k: v.value for k, v in r.quantities.items()}
    usable = budget()
    pairs = [(q["budget"], usable), (q["states_bytes"], 16 * params()), (q["params"] * 1e9, params())]
    wrong: list[str] = []
    said = re.search(r"fits ([0-9.]+) GB\?", " ".join(r.tables["strategies"].columns))
    pairs.append((float(said[1]) if said else math.nan, round(usable / 1e9, 1)))
    for row in r.tables["strategies"].rows:
        plan = plans[row[0]][0]
        if (plan.tp, plan.pp, plan.zero, plan.offload != "none") != NAMED[row[0]]:
            wrong.append(f"{row[0]}: {plan.label()}")
        chunks = f", v = {plan.virtual}" if plan.virtual > 1 else ""
        batch = plan.dp * plan.micro_batch * plan.microbatches
        if row[1] != f"{plan.micro_batch} x {plan.microbatches}{chunks}" or batch != sequences:
            wrong.append(f"{row[0]}: {row[1]}")
        want = plan_memory(plan, seq)
        cells = dict(zip(("weights", "gradients", "optimizer", "activations", "device"), row[3:8], strict=True))
        pairs += [(cells[k].value, want[k]) for k in cells]
        free = (usable - want["device"]) / usable
        verdict = ("yes" if free >= rule else "only just") if free >= 0 else "no"
        if not row[8].startswith(verdict):
            wrong.append(f"{row[0]}: {row[8]}")
        if free >= 0:
            pairs.append((_percent(row[9]) if row[9] != "—" else math.nan, round(free, 3)))
    chosen = plans["ZeRO-1"][0]
    for row in r.tables["micro_batches"].rows:
        b, accumulation, recompute = row[0], row[1], row[2]
        if chosen.dp * b * accumulation != sequences:
            wrong.append(f"micro-batch {b} x {accumulation}")
        plan = Plan(dp=chosen.dp, zero=chosen.zero, micro_batch=b, microbatches=accumulation, recompute=recompute)
        need = plan_memory(plan, seq)["device"]
        pairs.append((row[3].value, need))
        if (row[4] == "yes") != (need <= usable):
            wrong.append(f"micro-batch {b}, {recompute}: {row[4]}")
    best = plan_memory(chosen, seq)
    pairs += [
        (q["best_memory"], best["device"]),
        (q["best_activations"], best["activations"]),
        (q["rec_headroom"], (usable - best["device"]) / usable),
        (q["rec_headroom_gb"], usable - best["device"]),
    ]
    r.claim(
        "chapter 14's memory, cell by cell (the strategies and micro-batch tables, the budget, the best plan, its "
        "headroom) = each plan's bytes worked by hand: worst relative gap (percentages at their printed digit)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-9,
        formula="16 B/param sharded by ZeRO stage; per layer (16h + 8f + 8 + 4a) s b / tp; p + (p-1)/v in flight",
    )
    r.claim("the tables' layouts, batches and verdicts that disagree with their names and numbers", len(wrong), 0)


LABEL = r"TP (\d+) x PP (\d+) x DP (\d+), ZeRO-(\d), micro-batch (\d+) x (\d+)"


def _plan(match: re.Match | None, at: int = 1) -> Plan | None:
    """The plan a label printed in the words names (no pipeline, no offload, no recomputation)."""
    if match is None:
        return None
    tp, pp, dp, zero, b, acc = (int(match[at + i]) for i in range(6))
    return Plan(tp=tp, pp=pp, dp=dp, zero=zero, micro_batch=b, microbatches=acc)


def _step_of(ranked: list, plan: Plan | None) -> float:
    """The step the search timed for the plan a label names (NaN when it timed none such)."""
    return next((e.step_seconds for e in ranked if plan is not None and e.plan == plan), math.nan)


def check_words(r: Result, ranked: list, seq: int, sequences: int, rule: float) -> None:
    """The numbers the 'why' lines print, each at its printed digit, against the plans' bytes by hand, the time
    table's seconds and the experiment's own step and MFU; the recommendation against the headroom rule re-applied
    to the search's ranking; the job's hours, the ideal compute and the H100's slow step by hand."""
    q = {k: v.value for k, v in r.quantities.items()}
    why = " ".join(row[0] for row in r.tables["why"].rows)
    usable = budget()
    best = ranked[0]
    chosen = plan_memory(best.plan, seq)
    times = {row[0]: row[1].value for row in r.tables["time"].rows}
    step = best.step_seconds
    e_min, e_max = value("planner.mfu-band.error_min"), value("planner.mfu-band.error_max")
    h, layers = LLAMA2_7B["hidden"], LLAMA2_7B["layers"]
    n = params()
    pairs: list[tuple[float, float]] = []

    def said(pattern: str, wants: list[float]) -> None:
        m = re.search(pattern, why)
        found = [float(g.replace(",", "")) for g in m.groups()] if m else [math.nan] * len(wants)
        pairs.extend(zip(found, wants, strict=True))

    said(
        r"Fits: ([\d.]+) GB of the ([\d.]+) GB usable per GPU \(weights ([\d.]+), gradients ([\d.]+), optimizer "
        r"([\d.]+), activations ([\d.]+), NCCL buffers ([\d.]+) GB",
        [round(x / 1e9, 1) for x in (chosen["device"], usable, chosen["weights"], chosen["gradients"])]
        + [round(x / 1e9, 1) for x in (chosen["optimizer"], chosen["activations"], nccl_by_hand())],
    )
    free = (usable - chosen["device"]) / usable
    said(r"Headroom ([\d.]+)% \(([\d.]+) GB free", [round(100 * free, 1), round((usable - chosen["device"]) / 1e9, 1)])
    quick = re.search(r"fastest plan \(" + LABEL + r", ([\d.]+)% headroom\): ([\d.]+)% slower \(([\d.e-]+) s", why)
    quick_plan = _plan(quick)
    quick_mem = plan_memory(quick_plan, seq)["device"] if quick_plan else math.nan
    quick_step = _step_of(ranked, quick_plan)
    found = [float(quick[i]) for i in (7, 8, 9)] if quick else [math.nan] * 3
    pairs += [
        (found[0], round(100 * (usable - quick_mem) / usable, 1)),
        (found[1], round(100 * (step / quick_step - 1), 1)),
        (found[2], float(f"{step - quick_step:.3g}")),
    ]
    said(r"for ([\d.]+) GB less per GPU", [round((quick_mem - chosen["device"]) / 1e9, 1)])
    said(r"model state alone would be ([\d.]+) GB", [round(16 * n / 1e9, 1)])
    said(
        r"Data parallelism (\d+) with ZeRO-(\d)[^:]*: its communication leaves ([\d.]+)% of the step exposed",
        [best.plan.dp, best.plan.zero, round(100 * times.get("exposed dp", 0.0) / step, 1)],
    )
    said(
        r"Micro-batch of (\d+) sequence\(s\), (\d+) accumulated per step: (\d+) sequences = ([\d,]+) tokens",
        [best.plan.micro_batch, sequences // (best.plan.dp * best.plan.micro_batch), sequences, sequences * seq],
    )
    mfu = best.time.mfu
    said(
        r"Step ([\d.]+) s: compute (\d+)%; MFU ([\d.]+)% by the model \((\d+)%-(\d+)%[^)]*\), ([\d,]+) tokens/s",
        [float(f"{step:.3g}"), round(100 * times["compute"] / step), round(100 * mfu, 1)]
        + [round(100 * mfu / (1 + e_max)), round(100 * mfu / (1 + e_min)), round(sequences * seq / step)],
    )
    per_step = sequences * seq
    causal = mfu * (6 * n + 6 * layers * h * seq) / (6 * n + 12 * layers * h * seq)
    said(r"\(6N \+ 6Lhs\): ([\d.]+)%", [round(100 * causal, 1)])
    up = re.search(r"Runner-up: " + LABEL + r", ([\d.]+)% slower \(mostly ([a-z ]+); headroom ([\d.]+)%\)", why)
    up_plan = _plan(up)
    up_step = _step_of(ranked, up_plan)
    up_est = next((e for e in ranked if e.plan == up_plan), None)
    diffs = (
        {}
        if up_est is None
        else {k: v - best.time.breakdown.as_dict()[k] for k, v in up_est.time.breakdown.as_dict().items()}
    )
    up_mem = plan_memory(up_plan, seq)["device"] if up_plan else math.nan
    pairs += [
        (float(up[7]) if up else math.nan, round(100 * (up_step / step - 1), 1)),
        (float(up[9]) if up else math.nan, round(100 * (usable - up_mem) / usable, 1)),
    ]
    # the headroom rule re-applied: of the plans whose MFU lies within the band of the fastest's, the fastest with
    # the rule's headroom
    fastest = min(ranked, key=lambda e: e.step_seconds)
    inside = sorted((e for e in ranked if e.time.mfu >= fastest.time.mfu * (1 + e_min)), key=lambda e: e.step_seconds)
    roomy = [e for e in inside if (usable - plan_memory(e.plan, seq)["device"]) / usable >= rule]
    pick = roomy[0] if roomy else max(inside, key=lambda e: usable - plan_memory(e.plan, seq)["device"])
    wrong = [] if pick.plan == best.plan else [f"recommended {best.plan.label()}, the rule picks {pick.plan.label()}"]
    if up is None or up[8].replace(" ", "_") != max(diffs, key=lambda k: diffs[k], default=""):
        wrong.append("the runner-up's 'mostly ...'")
    # the time table's shares, the micro-batch table's full-recompute MFU, the job's hours, the ideal compute, H100
    for row in r.tables["time"].rows:
        pairs.append((_percent(row[2]), round(row[1].value / step, 3)))
    full = next((row for row in r.tables["micro_batches"].rows if row[0] == 1 and row[2] == "full"), None)
    pairs.append((round(q["full_recompute_mfu"], 3), _percent(full[6]) if full else math.nan))
    annotations, epochs = value("scaling_laws.Llama2-SFT.annotations"), value("scaling_laws.Llama2-SFT.epochs")
    meta_turn = value("sft_data.llama2-pref-meta.tokens_per_prompt") + value(
        "sft_data.llama2-pref-meta.tokens_per_response"
    )
    pairs += [
        (q["sft_hours_upper"], annotations * seq * epochs / per_step * step / 3600),  # every example fills a window
        (q["sft_hours_lower"], annotations * meta_turn * epochs / per_step * step / 3600),  # one prompt and answer
        (
            q["best_compute_ideal"],
            (6 * n + 6 * layers * h * seq)
            * per_step
            / (best.plan.tp * best.plan.pp * best.plan.dp * value("gpus.A100-SXM-80GB.bf16_mamf_tflops") * 1e12)
            / value("planner.training-share.tensor_core_share"),
        ),
        (q["h100_step_high"], q["h100_step"] * (1 + e_max)),
        (value("models.7B.params_published"), n),
    ]
    # the search's "no PP" line: ZeRO-1 at TP 1, one sequence per micro-batch, the batch accumulated
    plain = Plan(dp=best.plan.dp, zero=1, micro_batch=1, microbatches=sequences // best.plan.dp)
    need = plan_memory(plain, seq)["device"]
    said(
        r"no PP: at TP 1 ZeRO-1 fits without one \(([\d.]+) of ([\d.]+) GB, (\d+)% free\)",
        [round(need / 1e9, 1), round(usable / 1e9, 1), round(100 * (1 - need / usable))],
    )
    said(r"no CP: ([\d,]+)-token sequences", [seq])
    peak = value("gpus.A100-SXM-80GB.bf16_dense_tflops") * 1e12
    pairs.append((mfu, (6 * n + 12 * layers * h * seq) * per_step / (step * best.plan.gpus * peak)))
    # the optimizer step: a memory-bound pass over the rank's shard, reading the bf16 gradient and the fp32 master
    # and moments, writing them and the bf16 weight: 2 + 2 x 12 + 2 bytes per parameter at the HBM rate planned
    shard = math.ceil(n / best.plan.dp) if best.plan.zero else n
    hbm = value("gpus.A100-SXM-80GB.hbm_tbps") * 1e12 * MEMORY_EFFICIENCY
    pairs.append((times.get("optimizer", math.nan), shard * (2 + 2 * 12 + 2) / hbm))
    _advice(r, ranked, seq, usable, rule, pairs, wrong)
    r.claim(
        "chapter 14's words and scalars (the 'why' lines at their printed digits, the time shares, the job's hours, "
        "the ideal compute, the H100's slow step) = the plans by hand and the tables' own figures: worst relative gap",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-9,
    )
    r.claim("the recommendation and the runner-up's cause that disagree with the rules re-applied", len(wrong), 0)


def _label(plan: Plan) -> str:
    """A plan as the planner names it, written out here for the plans the page shows (no pipeline)."""
    zero = f"ZeRO-{plan.zero}" if plan.zero else "DDP"
    return f"TP {plan.tp} x PP {plan.pp} x DP {plan.dp}, {zero}, micro-batch {plan.micro_batch} x {plan.microbatches}"


def _advice(r: Result, ranked: list, seq: int, usable: float, rule: float, pairs: list, wrong: list) -> None:
    """The advice table's cells against the plans' bytes by hand and the steps the search timed."""
    q = {k: v.value for k, v in r.quantities.items()}
    cells = {row[0]: row[1] for row in r.tables["rec_advice"].rows}
    best, step = ranked[0], ranked[0].step_seconds
    chosen = plan_memory(best.plan, seq)["device"]
    if cells.get("recommended") != _label(best.plan):
        wrong.append(f"recommended: {cells.get('recommended')}")
    if (cells.get("schedule") == "no pipeline") != (best.plan.pp == 1):
        wrong.append(f"schedule: {cells.get('schedule')}")
    if (cells.get("recomputation") == "fits without recomputation") != (best.plan.recompute == "none"):
        wrong.append(f"recomputation: {cells.get('recomputation')}")

    def cell(key: str, pattern: str, wants: list[float]) -> None:
        m = re.search(pattern, cells.get(key, ""))
        found = [float(g.replace(",", "")) for g in m.groups()] if m else [math.nan] * len(wants)
        pairs.extend(zip(found, wants, strict=True))

    cell("memory", r"([\d.]+) of ([\d.]+) GB usable", [round(chosen / 1e9, 1), round(usable / 1e9, 1)])
    cell(
        "headroom",
        r"([\d.]+)% free \(the rule: at least (\d+)%\)",
        [round(100 * (1 - chosen / usable), 1), round(100 * rule)],
    )
    cell("step", r"([\d.]+) s", [float(f"{step:.3g}")])
    fast = re.search(
        LABEL + r": ([\d.]+)% faster, ([\d.]+) GB more per GPU, ([\d.]+)% headroom", cells.get("fastest plan", "")
    )
    quick = _plan(fast)
    quick_mem = plan_memory(quick, seq)["device"] if quick else math.nan
    slower = step / _step_of(ranked, quick) - 1
    found = [float(fast[i]) for i in (7, 8, 9)] if fast else [math.nan] * 3
    pairs += [
        (found[0], round(100 * slower, 1)),
        (found[1], round((quick_mem - chosen) / 1e9, 1)),
        (found[2], round(100 * (1 - quick_mem / usable), 1)),
        (q["rec_fastest_slower"], slower),
        (q["rec_fastest_extra_memory"], quick_mem - chosen),
        (q["rec_fastest_headroom"], 1 - quick_mem / usable),
    ]
    can = re.search(
        r"TP (\d+) x PP (\d+) x DP (\d+), DDP, micro-batch (\d+) x (\d+), sequence parallel: \+([\d.]+)% step time, "
        r"([\d.]+)% headroom",
        cells.get("canonical Megatron layout", ""),
    )
    canonical = (
        None
        if can is None
        else Plan(tp=int(can[1]), pp=int(can[2]), dp=int(can[3]), micro_batch=int(can[4]), microbatches=int(can[5]))
    )
    can_mem = plan_memory(canonical, seq)["device"] if canonical else math.nan
    gap = _step_of(ranked, canonical) / step - 1
    pairs += [
        (float(can[6]) if can else math.nan, round(100 * gap, 1)),
        (float(can[7]) if can else math.nan, round(100 * (1 - can_mem / usable), 1)),
        (q["rec_canonical_slower"], gap),
        (q["rec_canonical_headroom"], 1 - can_mem / usable),
    ]


def check_picture(r: Result, fig, plan: Plan, seq: int, rule: float) -> None:
    """The phase drawing read back: each bar's segments laid end to end from zero, the longest bar = the plan's
    peak by hand (its title at three figures), the dashed line at the usable memory, the dotted one at the rule's."""
    ax = fig.axes[0]
    bars: dict[float, list] = {}
    for patch in ax.patches:
        if (patch.get_gid() or "").startswith("seg:"):
            bars.setdefault(round(patch.get_y(), 6), []).append(patch)
    gaps, ends = [], []
    for segments in bars.values():
        segments.sort(key=lambda p: p.get_x())
        end = 0.0
        for seg in segments:
            gaps.append(abs(seg.get_x() - end))
            end = seg.get_x() + seg.get_width()
        ends.append(end)
    usable = budget()
    want = plan_memory(plan, seq)["peak"]  # the allocator's peak: the drawing leaves NCCL's buffers out
    title = re.search(r": ([\d.]+) GB", ax.get_title(loc="left"))
    lines = sorted(line.get_xdata()[0] for line in ax.lines)
    pairs = [
        (max(ends, default=math.nan) * 1e9, want),
        (float(title[1]) if title else math.nan, float(f"{want / 1e9:.3g}")),
        (lines[0] if len(lines) == 2 else math.nan, (1 - rule) * usable / 1e9),
        (lines[1] if len(lines) == 2 else math.nan, usable / 1e9),
    ]
    r.claim(
        "drawing: segments end to end from zero (largest gap, GB)",
        max(gaps, default=math.inf),
        0.0,
        abs_tol=1e-9,
    )
    r.claim(
        "drawing: the longest bar and the title = the plan's peak by hand; the lines at the usable memory and the "
        "headroom rule's: worst relative gap",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-9,
    )
