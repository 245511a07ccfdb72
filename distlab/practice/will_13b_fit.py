"""Practice 1: will a 13B full fine-tune fit on 8 x 80 GB (experiment practice-13b)."""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.memory.model_states import add_state_bytes, bytes_per_param
from distlab.planner.advice import add_advice, whiteboard
from distlab.planner.config import usable_bytes
from distlab.planner.cost_checks import check_step_causes
from distlab.planner.planner_validation import claim_band
from distlab.planner.rules import MIN_HEADROOM
from distlab.planner.search import search
from distlab.planner.worked_plan_7b import ddp_bucket_bytes_of_torch, finetune, strategy_table
from distlab.practice import peft_bytes, will_13b_fit_checks

ROUNDING = 0.05  # two significant figures are within 5 % of the number they round


def _wb(r: Result, name: str, exact: float, unit: str, what: str) -> float:
    """A whiteboard number: two significant figures of an exact value, claimed to agree with it."""
    rounded = whiteboard(exact)
    r.add(f"wb_{name}", rounded, unit, f"whiteboard: {what} (two significant figures)")
    r.claim(f"whiteboard {what}: the rounding is within 5 % of the exact value", rounded, exact, rel_tol=ROUNDING)
    return exact


def _whiteboard(r: Result, m, c, t) -> None:
    """The chain by hand: state, what each ZeRO stage leaves per GPU, one sequence's activations, the sum against
    the usable memory less the headroom rule, and a step from a published MFU."""
    from distlab.core.facts import value

    n, g = m.params(), c.gpus
    usable = usable_bytes(c.gpu)
    _wb(r, "states", 16 * n, "B", "model state 16 x N")
    _wb(r, "states_gpus", 16 * n / usable, "GPUs", "GPUs' usable memory the state fills")
    per = {1: (4 + 12 / g) * n, 2: (2 + 14 / g) * n, 3: 16 * n / g}
    for z, v in per.items():
        _wb(r, f"zero{z}", v, "B", f"ZeRO-{z} state per GPU")
    acts = 34 * t.seq * m.hidden * m.layers  # chapter 3's 34sbh per layer with FlashAttention, b = 1, no TP
    _wb(r, "acts", acts, "B", "one sequence's activations, 34 s h L")
    nccl = value("planner.memory-reserve.nccl_per_communicator_gb") * 1e9  # one communicator: DP
    limit = (1 - MIN_HEADROOM) * usable
    _wb(r, "limit", limit, "B", "usable memory less the headroom rule")
    for z in (2, 3):
        total = per[z] + acts + nccl
        _wb(r, f"zero{z}_total", total, "B", f"ZeRO-{z} state + one sequence + NCCL")
        _wb(r, f"zero{z}_free", 1 - total / usable, "fraction", f"ZeRO-{z}: the share left free")
    r.claim(
        "whiteboard: ZeRO-2 with one sequence stored breaks the headroom rule",
        per[2] + acts + nccl,
        limit,
        relation=">=",
        unit="B",
    )
    r.claim(
        "whiteboard: ZeRO-3 with one sequence stored meets it", per[3] + acts + nccl, limit, relation="<=", unit="B"
    )
    published = value("flash_attention.FA2.gpt_train_mfu")
    r.add("wb_published_mfu", published, "fraction", "FlashAttention-2's GPT training MFU on A100s")
    flops = (6 * n + 12 * m.layers * m.hidden * t.seq) * t.global_batch_tokens
    _wb(r, "step", flops / (g * c.gpu.peak_flops("bf16") * published), "s", "step at that MFU")


def _peft(r: Result, m, c) -> None:
    """The follow-ups: 8-bit Adam, LoRA and QLoRA, model state in bytes (peft_bytes, sourced byte counts)."""
    from distlab.core.facts import value
    from distlab.core.results import Quantity

    usable = usable_bytes(c.gpu)
    rows = []
    for method, what in (
        ("full", "full fine-tune, AdamW (16 B per parameter)"),
        ("full-adam8bit", "full fine-tune, 8-bit Adam"),
        ("lora", f"LoRA r = {peft_bytes.LORA_RANK} on every linear layer, bf16 base"),
        ("qlora", "QLoRA: the same adapters on an NF4 base with double quantization"),
    ):
        b = peft_bytes.state_bytes(m, method)
        key = method.replace("-", "_")
        r.add(f"peft_{key}", b, "B", f"{what}: model state")
        r.add(f"peft_{key}_gpus", b / usable, "GPUs", f"{what}: GPUs' usable memory it fills")
        rows.append([what, Quantity(b, "B"), f"{b / m.params():.3g}", f"{b / usable:.2g}"])
    r.table(
        "peft",
        ["method", "model state", "bytes per parameter", "80 GB GPUs' usable memory"],
        rows,
        caption="Llama 2 13B: model state of the cheaper fine-tunes, before activations (computed from the papers' "
        "byte counts, distlab/data/peft_bytes.toml)",
    )
    r.add("lora_params", peft_bytes.lora_params(m), "", "LoRA's trainable parameters")
    r.add("lora_rank", peft_bytes.LORA_RANK, "", "LoRA rank (a scenario input)")
    r.add("nf4_bits", peft_bytes.nf4_bits_per_param(), "bit", "NF4 bits per parameter with double quantization")
    r.add("adam8bit_bytes", peft_bytes.adam8bit_bytes_per_param(), "B", "bytes per parameter with 8-bit Adam")
    r.claim(
        "NF4 with double quantization = the QLoRA paper's 4 + 0.127 bits per parameter",
        peft_bytes.nf4_bits_per_param(),
        4 + value("peft_bytes.nf4.paper_bits_per_param"),
        rel_tol=2e-3,
        unit="bit",
    )
    h, f, layers, rank = 5120, 13824, 40, peft_bytes.LORA_RANK  # Llama 2 13B by hand: no GQA, SwiGLU
    r.claim(
        "LoRA parameters = L x r x (4 x 2h + 3 x (h + ffn)) for Llama 2 13B (by hand)",
        peft_bytes.lora_params(m),
        layers * rank * (4 * 2 * h + 3 * (h + f)),
        unit="",
    )
    r.claim(
        "8-bit Adam: 2 + 2 + 4 + 2 x (1 + 4/2048) bytes per parameter (by hand)",
        peft_bytes.adam8bit_bytes_per_param(),
        8 + 2 * (1 + 4 / 2048),
        rel_tol=1e-12,
        unit="B",
    )
    r.claim(
        "QLoRA's 13B model state fits one GPU with the headroom rule's margin to spare (before activations)",
        peft_bytes.state_bytes(m, "qlora"),
        (1 - MIN_HEADROOM) * usable,
        relation="<=",
        unit="B",
    )


# ---------------------------------------------------------------- practice (a): will a 13B full fine-tune fit?
@experiment(
    "practice-13b",
    "practice: does a 13B full fine-tune fit on 80 GB GPUs? memory per strategy and the fewest GPUs",
    kind="computed",
)
def practice_13b(device: str) -> Result:
    from distlab.core.results import Quantity
    from distlab.planner.calibration import mfu_band, with_band
    from distlab.planner.search import NothingFits
    from distlab.scaling_laws import sft_mean_example_tokens, sft_tokens

    r = Result("practice-13b", kind="computed")
    m, c, t = finetune("13B")
    n = m.params()
    r.add("params", n / 1e9, "billion", "Llama 2 13B parameters")
    add_state_bytes(r)  # the bytes per parameter the page quotes, claimed
    r.add("states_bytes", bytes_per_param() * n, "B", "model state at the default bytes per parameter")
    r.add("states_over_hbm", bytes_per_param() * n / usable_bytes(c.gpu), "", "model state / one GPU's usable memory")
    r.claim(
        "13B: model state alone exceeds two 80 GB GPUs",
        bytes_per_param() * n,
        2 * usable_bytes(c.gpu),
        relation=">=",
        unit="B",
        formula="16Ψ",
    )
    strategy_table(
        r,
        "strategies",
        m,
        c,
        t,
        names=("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3 / FSDP", "ZeRO-3 + CPU offload", "TP 8 (no ZeRO)", "TP 2 x ZeRO-3"),
    )
    _whiteboard(r, m, c, t)
    ranked = search(m, c, t)
    add_advice(r, "rec", m, c, t, ranked)
    best = ranked[0]
    check_step_causes(r, [(e, m, c, t, "13B") for e in ranked[:3]], ddp_bucket_bytes_of_torch())
    r.add("rec_tp", best.plan.tp, "", "the recommended plan's TP")
    r.add("rec_zero", best.plan.zero, "", "its ZeRO stage")
    r.add("rec_memory", best.memory_bytes, "B", "its memory per GPU")
    r.claim(
        "8 GPUs: 'fits without recomputation or offload' (the answer): the recommended plan does neither",
        int(best.plan.recompute != "none") + int(best.plan.offload != "none"),
        0,
    )
    r.claim(
        "'ZeRO-1 ... under the rule, not a plan to run' (the answer): its best plan leaves less free than the rule",
        r.quantities["strategies_zero1_headroom"].value,
        MIN_HEADROOM,
        relation="<=",
        unit="fraction",
    )
    r.claim(
        "'ZeRO-2 keeps its headroom only by recomputing' (the answer): its recommended plan recomputes",
        r.quantities["strategies_zero2_recomputes"].value,
        1,
    )
    r.claim(
        "'ZeRO-3 keeps one whole sequence's activations' (the answer): its recommended plan does not recompute",
        r.quantities["strategies_zero3_recomputes"].value,
        0,
    )
    _peft(r, m, c)
    rows = []
    for gpus in (1, 2, 4, 8):
        m, c, t = finetune("13B", gpus_per_node=gpus)
        try:
            e = search(m, c, t)[0]
        except NothingFits:
            rows.append([gpus, "nothing fits", "—", "—", "—", "—", "—"])
            r.add(f"gpus{gpus}_fits", 0, "", f"{gpus} GPUs: fits?")
            continue
        # Llama 2-Chat's fine-tune at chapter 11's mean example length (the window x the examples is an upper bound)
        hours = sft_tokens(sft_mean_example_tokens()) / t.global_batch_tokens * e.step_seconds / 3600
        lo, hi = mfu_band(e.time.mfu)
        rows.append(
            [
                gpus,
                e.plan.label(),
                Quantity(e.memory_bytes, "B"),
                Quantity(e.memory.host, "B"),
                Quantity(e.step_seconds, "s"),
                with_band(e.time.mfu),
                f"{hours:.2g} to {hours * e.time.mfu / lo:.2g}",
            ]
        )
        r.add(f"gpus{gpus}_fits", 1, "", f"{gpus} GPUs: fits?")
        r.add(f"gpus{gpus}_hours", hours, "h", f"{gpus} GPUs: Llama 2-Chat's SFT tokens")
        r.add(f"gpus{gpus}_host", e.memory.host, "B", f"{gpus} GPUs: host memory per GPU")
        r.add(f"gpus{gpus}_mfu", e.time.mfu, "fraction", f"{gpus} GPUs: MFU")
        r.add(f"gpus{gpus}_mfu_low", lo, "fraction", f"{gpus} GPUs: its band, low")
        r.add(f"gpus{gpus}_mfu_high", hi, "fraction", f"{gpus} GPUs: its band, high")
        r.add(f"gpus{gpus}_hours_slow", hours * e.time.mfu / lo, "h", f"{gpus} GPUs: SFT hours at the band's low MFU")
        r.add(f"gpus{gpus}_tp", e.plan.tp, "", f"{gpus} GPUs: the best plan's TP")
        r.add(f"gpus{gpus}_zero", e.plan.zero, "", f"{gpus} GPUs: the best plan's ZeRO stage")
        r.add(f"gpus{gpus}_offloads", int(e.plan.offload != "none"), "", f"{gpus} GPUs: 1 if it offloads")
        r.claim(
            f"{gpus} GPUs: the recommended plan leaves the headroom rule's margin (the page says every row does)",
            e.headroom_fraction,
            MIN_HEADROOM,
            relation=">=",
            unit="fraction",
        )
        if gpus == 1:
            r.claim("1 GPU: 'it fits by ZeRO-Offload' (the page): the plan offloads", int(e.plan.offload != "none"), 1)
        if gpus == 8:
            r.claim(
                "8 GPUs: SFT hours = 27,540 examples x mean length x 2 epochs / 262,144 tokens per step x step",
                hours * 3600,
                27540 * sft_mean_example_tokens() * 2 / 262144 * e.step_seconds,
                rel_tol=1e-9,
                unit="s",
            )
    r.table(
        "gpus",
        [
            "A100 80 GB GPUs",
            "recommended plan",
            "GPU memory",
            "host memory per GPU",
            "step",
            "MFU (band)",
            "hours for Llama 2-Chat's SFT (model to band's low end)",
        ],
        rows,
        caption="The same fine-tune on fewer GPUs of one node: offloading to host memory makes few GPUs fit (computed)",
    )
    claim_band(r)  # the MFU bands this page quotes
    will_13b_fit_checks.claims(r, usable=usable_bytes(c.gpu), rank=peft_bytes.LORA_RANK)
    return r
