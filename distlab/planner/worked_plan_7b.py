"""Chapter 14, the worked plan: fine-tuning Llama 2 7B on 8 x 80 GB, from memory per strategy to the chosen
plan's micro-batch, recomputation, step time and MFU, and the same job on H100s.

The helpers here (a fine-tune as Llama 2-Chat's, the strategy families, the table of each family's best or
leanest plan) are shared with the practice questions (distlab/practice.py). Scenario inputs are named
constants; everything else is computed by the planner (distlab.planner.search, distlab.planner.cost).
"""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.memory.model_states import add_state_bytes, bytes_per_param
from distlab.planner.advice import add_advice
from distlab.planner.calibration import mfu_band, with_band
from distlab.planner.config import Plan, Training, cluster, usable_bytes
from distlab.planner.cost_checks import check_cost_terms, check_step_causes
from distlab.planner.planner_validation import claim_band
from distlab.planner.search import search
from distlab.planner.worked_plan_checks import params as params_by_hand

STRATEGIES = {  # name -> which plans belong to it
    "DDP": lambda p: p.tp == p.pp == 1 and p.zero == 0,
    "ZeRO-1": lambda p: p.tp == p.pp == 1 and p.zero == 1 and p.offload == "none",
    "ZeRO-2": lambda p: p.tp == p.pp == 1 and p.zero == 2 and p.offload == "none",
    "ZeRO-3 / FSDP": lambda p: p.tp == p.pp == 1 and p.zero == 3 and p.offload == "none",
    "ZeRO-3 + CPU offload": lambda p: p.tp == p.pp == 1 and p.zero == 3 and p.offload != "none",
    "TP 8 (no ZeRO)": lambda p: p.tp == 8 and p.pp == 1 and p.zero == 0,
    "TP 2 x ZeRO-3": lambda p: p.tp == 2 and p.pp == 1 and p.zero == 3 and p.offload == "none",
    "PP 4 x DP 2, ZeRO-1": lambda p: p.tp == 1 and p.pp == 4 and p.zero == 1 and p.offload == "none",
}


SLUGS = {
    "DDP": "ddp",
    "ZeRO-1": "zero1",
    "ZeRO-2": "zero2",
    "ZeRO-3 / FSDP": "zero3",
    "ZeRO-3 + CPU offload": "offload",
    "TP 8 (no ZeRO)": "tp8",
    "TP 2 x ZeRO-3": "tp2",
    "PP 4 x DP 2, ZeRO-1": "pp4",
}


def finetune(name: str, gpu: str = "A100-SXM-80GB", nodes: int = 1, gpus_per_node: int = 8, seq: int | None = None):
    """A full fine-tune as Llama 2-Chat's: 64 sequences per step of the model's length, mixed AdamW."""
    from distlab.planner.config import model
    from distlab.planner.search import finetune_batch_sequences

    m = model(name)
    seq = seq or m.seq
    t = Training(global_batch_tokens=finetune_batch_sequences() * seq, seq=seq, task="finetune")
    return m, cluster(gpu, nodes=nodes, gpus_per_node=gpus_per_node), t


def leanest(m, c, t, where):
    """The plan of a family that needs the least GPU memory, with its memory by category."""
    from distlab.planner.cost import memory_per_gpu
    from distlab.planner.search import RULES, candidates

    rules = tuple(x for x in RULES if x != "pp-when-needed")
    plans = [p for p in candidates(m, c, t, rules) if where(p)]
    if not plans:
        return None, None
    p = min(plans, key=lambda q: memory_per_gpu(m, c, t, q).device_bytes)
    return p, memory_per_gpu(m, c, t, p)


def fits_verdict(headroom: float) -> str:
    """'yes' only with the headroom rule's margin: a plan that fits with less free is one long batch from an OOM,
    and a table that says a bare 'yes' beside 7 % free reads as advice to run it."""
    from distlab.planner.rules import MIN_HEADROOM

    return "yes" if headroom >= MIN_HEADROOM else f"only just: under the {MIN_HEADROOM:.0%} rule"


def _batches(plan) -> str:
    """The micro-batch x accumulation cell; an interleaved pipeline adds its chunks per stage (its memory rests on
    them: p + (p - 1)/v micro-batches in flight on the first stage)."""
    return f"{plan.micro_batch} x {plan.microbatches}" + (f", v = {plan.virtual}" if plan.virtual > 1 else "")


def strategy_table(r: Result, key: str, m, c, t, names=tuple(STRATEGIES)) -> dict:
    """Each strategy's best plan (or its leanest, when none fits): memory by category, fits, step, MFU."""
    from distlab.core.results import Quantity
    from distlab.planner.search import NothingFits

    budget = usable_bytes(c.gpu)
    out, table = {}, []
    for name in names:
        try:
            e = search(m, c, t, where=STRATEGIES[name])[0]
            plan, mem, fits = e.plan, e.memory, True
        except NothingFits:
            e, (plan, mem), fits = None, leanest(m, c, t, STRATEGIES[name]), False
        if plan is None:
            continue
        total = mem.device_bytes
        out[name] = (plan, mem, e)
        cats = mem.as_dict()
        biggest = max(cats, key=lambda k: cats[k])
        table.append(
            [
                name,
                _batches(plan),
                plan.recompute,
                *(Quantity(getattr(mem, k), "B") for k in ("weights", "gradients", "optimizer", "activations")),
                Quantity(total, "B"),
                fits_verdict(e.headroom_fraction) if e else f"no: {biggest}",
                f"{e.headroom_fraction:.1%}" if e else "—",
                Quantity(e.step_seconds, "s") if e else "—",
                with_band(e.time.mfu) if e else "—",
            ]
        )
        slug = SLUGS[name]
        r.add(f"{key}_{slug}_bytes", total, "B", f"{name}: memory per GPU ({'best' if fits else 'leanest'} plan)")
        r.add(f"{key}_{slug}_recomputes", int(plan.recompute != "none"), "", f"{name}: 1 if its plan recomputes")
        r.add(f"{key}_{slug}_micro_batch", plan.micro_batch, "sequences", f"{name}: its plan's micro-batch")
        if e:
            r.add(f"{key}_{slug}_headroom", e.headroom_fraction, "fraction", f"{name}: its plan's headroom")
            r.add(f"{key}_{slug}_mfu", e.time.mfu, "fraction", f"{name}: MFU of its best plan")
            lo, hi = mfu_band(e.time.mfu)
            r.add(f"{key}_{slug}_mfu_low", lo, "fraction", f"{name}: its band, low (chapter 13)")
            r.add(f"{key}_{slug}_mfu_high", hi, "fraction", f"{name}: its band, high")
    r.table(
        key,
        [
            "strategy",
            "micro-batch x accumulation",
            "recompute",
            "weights",
            "gradients",
            "optimizer",
            "activations",
            "total per GPU",
            f"fits {budget / 1e9:.1f} GB?",
            "headroom",
            "step",
            "MFU (band)",
        ],
        table,
        caption=f"{m.name}, {t.task}, {t.global_batch_tokens:,} tokens per step, on {c.gpus} x {c.gpu.name}: the "
        "recommended plan of each strategy (the headroom rule within it), or, where none fits, the one that needs "
        "least memory (computed)",
    )
    return out


def ddp_bucket_bytes_of_torch() -> int:
    """DistributedDataParallel's default bucket cap in bytes, read from the installed PyTorch itself."""
    import inspect

    from torch.nn.parallel import distributed

    if hasattr(distributed, "_DEFAULT_BUCKET_CAP_MB"):  # torch 2.13: bucket_cap_mb=None means this
        return int(distributed._DEFAULT_BUCKET_CAP_MB * distributed._MB_TO_BYTES)
    default = inspect.signature(distributed.DistributedDataParallel.__init__).parameters["bucket_cap_mb"].default
    return int(default * 1024 * 1024)  # older torch: the argument's own default, in MiB


@experiment(
    "worked-plan-7b",
    "the full plan for fine-tuning Llama 2 7B on 8 x 80 GB: memory per strategy, micro-batch, step time, MFU",
    kind="computed",
)
def worked_plan_7b(device: str) -> Result:
    from distlab.core.results import Quantity
    from distlab.planner.cost import memory_per_gpu, step
    from distlab.planner.search import explain
    from distlab.scaling_laws import sft_tokens

    r = Result("worked-plan-7b", kind="computed")
    m, c, t = finetune("7B")
    n = m.params()
    budget = usable_bytes(c.gpu)
    r.add("params", n / 1e9, "billion", "Llama 2 7B parameters")
    r.add("layers", m.layers, "layers", "Llama 2 7B layers")
    from distlab.core.facts import value

    r.add("sft_epochs", value("scaling_laws.Llama2-SFT.epochs"), "epochs", "Llama 2-Chat's SFT epochs")
    add_state_bytes(r)  # the 16 (and 18) bytes per parameter the page quotes, claimed
    r.add("states_bytes", bytes_per_param() * n, "B", "model state at the default bytes per parameter")
    r.add("budget", budget, "B", "usable memory per GPU")
    r.add("global_sequences", t.sequences, "sequences", "global batch")
    r.add("global_tokens", t.global_batch_tokens, "tokens", "global batch")
    r.claim(
        "DDP cannot fit: 16 bytes per parameter exceed one GPU before any activation",
        bytes_per_param() * n,
        budget,
        relation=">=",
        unit="B",
        formula="16Ψ",
    )
    plans = strategy_table(r, "strategies", m, c, t)
    check_cost_terms(r, m, c, t, plans, params_by_hand(), ddp_bucket_bytes_of_torch())  # Llama 2 7B by its config
    ranked = search(m, c, t)
    best = ranked[0]
    timed = [(e, m, c, t, "7B") for _, _, e in plans.values() if e is not None] + [(best, m, c, t, "7B")]
    check_step_causes(r, timed, ddp_bucket_bytes_of_torch())
    p = best.plan
    r.table(
        "why",
        ["why the first plan"],
        [[line] for line in explain(m, c, t, ranked)],
        caption="distlab plan --model 7B --task finetune --gpu A100-SXM-80GB",
    )
    add_advice(r, "rec", m, c, t, ranked)
    _phase_picture(r, best, budget, c.gpu.name, t.seq)
    r.claim(
        "the Takeaway's 'no tensor or pipeline parallelism': the recommended plan has TP 1 and PP 1", p.tp * p.pp, 1
    )
    r.claim("the Takeaway's 'do not recompute': the recommended plan recomputes nothing", int(p.recompute != "none"), 0)
    r.claim("the Takeaway's 'no offload': the recommended plan offloads nothing", int(p.offload != "none"), 0)
    from distlab.planner.calibration import stored_error_range
    from distlab.planner.rules import MIN_HEADROOM

    qs = r.quantities
    r.claim(
        "the Takeaway's 'at the edge on memory': the fastest plan leaves less than the headroom rule",
        qs["rec_fastest_headroom"].value,
        MIN_HEADROOM,
        relation="<=",
        unit="fraction",
    )
    r.claim(
        "the Takeaway's 'inside the model's error on time': the fastest is faster by less than the band's e_min",
        qs["rec_fastest_slower"].value,
        -stored_error_range()[0],
        relation="<=",
        unit="fraction",
    )
    lo, hi = mfu_band(best.time.mfu)
    r.add("best_label_zero", p.zero, "", "the best plan's ZeRO stage")
    r.add("best_micro_batch", p.micro_batch, "sequences", "the best plan's micro-batch")
    r.add("best_accumulation", p.microbatches, "", "the best plan's gradient-accumulation steps")
    r.add("best_recompute", {"none": 0, "selective": 1, "full": 2}[p.recompute], "", "0 none, 1 selective, 2 full")
    r.add("best_memory", best.memory_bytes, "B", "the best plan's memory per GPU")
    r.add("best_activations", best.memory.activations, "B", "its activations")
    r.add("best_step", best.step_seconds, "s", "its step time")
    r.add("best_mfu", best.time.mfu, "fraction", "its MFU by the model")
    r.add("best_mfu_low", lo, "fraction", "the low end of its band (chapter 13)")
    r.add("best_mfu_high", hi, "fraction", "the high end of its band")
    r.add("best_tokens_per_s", best.time.tokens_per_second, "tokens/s", "its throughput")
    r.claim("the chosen plan fits", best.memory_bytes, budget, relation="<=", unit="B")
    r.claim(
        "global batch = dp x micro-batch x accumulation x sequence",
        p.dp * p.micro_batch * p.microbatches * t.seq,
        t.global_batch_tokens,
        unit="tokens",
    )
    parts = best.time.breakdown.as_dict()
    ordered = sorted(((k, v) for k, v in parts.items() if v > 0), key=lambda x: -x[1])
    r.table(
        "time",
        ["component", "seconds per step", "share"],
        [[k.replace("_", " "), Quantity(v, "s"), f"{v / best.step_seconds:.1%}"] for k, v in ordered],
        caption="Where the chosen plan's step goes (distlab.planner.cost, computed)",
    )
    # micro-batch and recomputation for the chosen layout
    rows = []
    step_seconds: dict[tuple[int, str], float] = {}  # (micro-batch, recompute) -> its step
    for b in (1, 2, 4, 8):
        for rc in ("none", "full"):
            q = Plan(
                tp=p.tp,
                pp=p.pp,
                dp=p.dp,
                zero=p.zero,
                offload=p.offload,
                micro_batch=b,
                microbatches=t.sequences // (p.dp * b),
                recompute=rc,
            )
            mem = memory_per_gpu(m, c, t, q).device_bytes
            s = step(m, c, t, q)
            step_seconds[b, rc] = s.seconds
            rows.append(
                [
                    b,
                    q.microbatches,
                    rc,
                    Quantity(mem, "B"),
                    "yes" if mem <= budget else "no",
                    Quantity(s.seconds, "s"),
                    with_band(s.mfu),
                ]
            )
            if b == 1 and rc == "full":
                r.add("full_recompute_mfu", s.mfu, "fraction", "the same layout with full recomputation")
                lo, hi = mfu_band(s.mfu)
                r.add("full_recompute_mfu_low", lo, "fraction", "its band, low (chapter 13)")
                r.add("full_recompute_mfu_high", hi, "fraction", "its band, high")
    r.table(
        "micro_batches",
        ["micro-batch", "accumulation", "recompute", "memory per GPU", "fits?", "step", "MFU (band)"],
        rows,
        caption=f"The chosen layout ({p.label().split(', micro')[0]}) with other micro-batches (computed)",
    )
    a1 = memory_per_gpu(m, c, t, Plan(dp=p.dp, zero=p.zero, micro_batch=1, microbatches=8)).activations
    a2 = memory_per_gpu(m, c, t, Plan(dp=p.dp, zero=p.zero, micro_batch=2, microbatches=4)).activations
    r.claim("activations double with the micro-batch (no recompute)", a2, 2 * a1, rel_tol=1e-12, unit="B")
    # the whole fine-tune: Llama 2-Chat's examples x their mean length (chapter 11's basis), packed into windows;
    # the window x the examples is the upper bound, one prompt and answer the lower
    from distlab.scaling_laws import sft_mean_example_tokens

    mean = sft_mean_example_tokens()
    steps = sft_tokens(mean) / t.global_batch_tokens
    r.add("sft_mean_tokens", mean, "tokens", "mean tokens per SFT example (chapter 11's basis)")
    r.add("sft_steps", steps, "steps", "Llama 2-Chat's SFT in steps of this batch")
    r.add("sft_hours", steps * best.step_seconds / 3600, "h", "... on these 8 GPUs")
    for name, basis in (("upper", "packed-window"), ("lower", "llama2-meta-turn")):
        h = sft_tokens(sft_mean_example_tokens(basis)) / t.global_batch_tokens * best.step_seconds / 3600
        r.add(f"sft_hours_{name}", h, "h", f"... with every example {basis}")
    best_low = r.quantities["best_mfu_low"].value  # not `lo`: the micro-batch loop above rebinds it
    slow = steps * best.step_seconds * best.time.mfu / best_low / 3600
    r.add("sft_hours_slow", slow, "h", "... at the recommended plan's band's low MFU")
    r.claim(
        "the job at the band's low end: hours x MFU is the same work (the recommended plan's MFU, its band's low)",
        r.quantities["sft_hours_slow"].value * r.quantities["best_mfu_low"].value,
        r.quantities["sft_hours"].value * r.quantities["best_mfu"].value,
        rel_tol=1e-9,
        unit="h",
        formula="time per step ∝ 1 / MFU at fixed FLOPs",
    )
    r.claim(
        "SFT hours = examples x mean length x epochs / tokens per step x step",
        r.quantities["sft_hours"].value * 3600,
        27540 * mean * 2 / (64 * 4096) * best.step_seconds,
        rel_tol=1e-9,
        unit="s",
        formula="Llama 2-Chat: 27,540 annotations, 2 epochs, 64 windows of 4096 per step (typed here)",
    )
    # compute against a hand derivation: (6N + 6Lhs) FLOPs per token at the sustained matmul rate
    from distlab.planner.kernels import matmul_fraction, training_share

    ideal = (6 * n + 6 * m.layers * m.hidden * t.seq) * t.global_batch_tokens
    ideal /= c.gpus * matmul_fraction(c.gpu) * c.gpu.peak_flops("bf16") * training_share()
    compute = best.time.breakdown.compute
    r.add("best_compute", compute, "s", "the best plan's compute per step")
    r.add("best_compute_ideal", ideal, "s", "(6N + 6Lhs) tokens at the sustained matmul rate x the training share")
    r.claim("the best plan's compute >= its FLOPs at the training matmul rate", compute, ideal, relation=">=", unit="s")
    r.claim(
        "... and <= 1.3 x that (partial waves, FlashAttention, memory-bound work)",
        compute,
        1.3 * ideal,
        relation="<=",
        unit="s",
    )
    r.add(
        "mb1_slower", step_seconds[1, "none"] / best.step_seconds - 1, "fraction", "micro-batch 1 against the best plan"
    )
    _qualitative(r)
    _h100_variant(r)
    claim_band(r)  # the MFU bands this page quotes
    from distlab.planner.comms_checks import comms_by_hand

    comms_by_hand(r)  # the communication model under this page's numbers, by hand (issue 26)
    from distlab.planner import worked_plan_checks
    from distlab.planner.rules import MIN_HEADROOM

    worked_plan_checks.check(r, plans, t.seq, t.sequences, MIN_HEADROOM)  # the memory, by hand (issue 26)
    worked_plan_checks.check_words(r, ranked, t.seq, t.sequences, MIN_HEADROOM)
    return r


def _qualitative(r: Result) -> None:
    """The page's words about the strategy table, checked against it."""
    q = {k: v.value for k, v in r.quantities.items()}
    mfus = [q[f"strategies_{s}_mfu"] for s in ("zero1", "zero2", "zero3")]
    r.claim(
        "'ZeRO-1, 2 and 3 run at nearly the same speed': their MFUs within 5 % of each other",
        max(mfus) / min(mfus),
        1.05,
        relation="<=",
    )
    r.claim(
        "'CPU offload costs time': its MFU below ZeRO-1's",
        q["strategies_offload_mfu"],
        q["strategies_zero1_mfu"],
        relation="<=",
        unit="fraction",
    )
    r.claim(
        "'TP 8 is slower than sharding': its MFU below the recommended plan's",
        q["strategies_tp8_mfu"],
        q["best_mfu"],
        relation="<=",
        unit="fraction",
    )
    r.claim(
        "'PP 4 fits with the least memory' of the strategies that fit",
        q["strategies_pp4_bytes"],
        min(q[f"strategies_{s}_bytes"] for s in ("zero1", "zero2", "zero3", "offload", "tp8", "tp2", "pp4")),
        unit="B",
    )


def _h100_variant(r: Result) -> None:
    m, c, t = finetune("7B", gpu="H100-SXM")
    best = search(m, c, t)[0]
    r.claim(
        "H100: the same ZeRO stage as on A100s (the page says 'again')",
        best.plan.zero,
        r.quantities["best_label_zero"].value,
    )
    r.add("h100_headroom", best.headroom_fraction, "fraction", "H100: the recommended plan's headroom")
    lo, hi = mfu_band(best.time.mfu)
    r.add("h100_label_zero", best.plan.zero, "", "H100: the best plan's ZeRO stage")
    r.add("h100_step", best.step_seconds, "s", "H100: step by the model")
    r.add("h100_mfu", best.time.mfu, "fraction", "H100: MFU by the model")
    r.add("h100_mfu_low", lo, "fraction", "H100: the low end of its band")
    r.add("h100_mfu_high", hi, "fraction", "H100: the high end of its band")
    r.add("h100_step_high", best.step_seconds * best.time.mfu / lo, "s", "H100: the step at the band's low MFU")


def _phase_picture(r: Result, best, budget: float, gpu: str, seq: int) -> None:
    """The recommended plan's memory, phase by phase, drawn; the drawn bars checked against the plan's own figure
    and against the optimizer step's bytes added up here from the breakdown's fields."""
    from distlab.planner.phase_picture import draw_phases
    from distlab.planner.rules import MIN_HEADROOM

    mem = best.memory
    fig = draw_phases(mem.by_phase(), budget, MIN_HEADROOM, gpu.split()[0] if " " in gpu else gpu)
    drawn: dict[str, float] = {}
    for patch in fig.axes[0].patches:
        kind, _, rest = (patch.get_gid() or "").partition(":")
        if kind == "seg":
            phase = rest.split(":")[0]
            drawn[phase] = drawn.get(phase, 0.0) + patch.get_width() * 1e9
    r.claim(
        "drawing: the longest bar plus NCCL's buffers = the recommended plan's memory per GPU",
        max(drawn.values()) + mem.comm_buffers,
        best.memory_bytes,
        rel_tol=1e-9,
        unit="B",
    )
    r.claim(
        "drawing: the optimizer-step bar = weights + optimizer + gradients + buckets + step temporaries",
        drawn["optimizer_step"],
        mem.weights + mem.optimizer + mem.gradients + mem.grad_buckets + mem.step_temporaries,
        rel_tol=1e-9,
        unit="B",
    )
    r.add("picture_peak_phase", ["forward", "backward", "optimizer_step"].index(mem.peak_phase), "", "0, 1, 2")
    r.claim(
        "drawing: the longest bar is the peak phase the planner names (0 forward, 1 backward, 2 optimizer)",
        list(drawn).index(max(drawn, key=lambda k: drawn[k])),
        r.quantities["picture_peak_phase"].value,
    )
    from distlab.planner import worked_plan_checks

    worked_plan_checks.check_picture(r, fig, best.plan, seq, MIN_HEADROOM)
    r.figure(
        "phases",
        fig,
        "The recommended plan's memory on one GPU in each phase of a step, by the planner's memory model: the longest "
        "bar is what must fit; the dashed line is the usable memory, the dotted one what the headroom rule lets a "
        "recommended plan use",
    )
