"""Practice 1: will a 13B full fine-tune fit on 8 x 80 GB (experiment practice-13b)."""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.memory.model_states import add_state_bytes, bytes_per_param
from distlab.planner.planner_validation import claim_band
from distlab.planner.search import search
from distlab.planner.worked_plan_7b import finetune, strategy_table


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
    from distlab.planner.config import usable_bytes

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
            "best plan",
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
    return r
