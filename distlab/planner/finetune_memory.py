"""What fine-tuners run, in bytes: each precision's and optimizer's model state per parameter, QLoRA's NF4 base, and
Llama 2 13B on one 80 GB GPU four ways (full AdamW, 8-bit AdamW, LoRA, QLoRA), each priced by phase.

Every bytes-per-parameter figure is claimed against the expression its source prints (the ZeRO paper's 2 + 2 + 12,
torchtune's all-bf16 state, Megatron-Core's precision-aware optimizer, bitsandbytes' 8-bit blocks, the QLoRA paper's
4 + 0.127 bits), so a typo in distlab/data/memory_buffers.toml fails the page. Pure Python.
"""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.models.shapes import preset
from distlab.planner.config import Plan, Training, cluster, device_capacity_bytes
from distlab.planner.memory import (
    fits,
    lora_params_per_layer,
    memory_per_gpu,
    nf4_bytes_per_param,
    state_bytes_per_param,
)

MODEL = "13B"
SEQ = 4096
LORA_RANK = 16
# (label, Training overrides): the four ways practice 1 weighs; micro-batch 1, full recomputation (what fits first)
WAYS: tuple[tuple[str, dict[str, str]], ...] = (
    ("full AdamW, mixed precision", {}),
    ("full, pure bf16 + 8-bit AdamW", {"precision": "bf16", "optimizer": "adamw-8bit"}),
    ("LoRA (bf16 base)", {"peft": "lora"}),
    ("QLoRA (NF4 base)", {"peft": "qlora"}),
)
PLAN = Plan(micro_batch=1, microbatches=64, recompute="full")


def _training(**kw) -> Training:
    return Training(global_batch_tokens=64 * SEQ, seq=SEQ, task="finetune", lora_rank=LORA_RANK, **kw)


@experiment(
    "finetune-memory",
    "model-state bytes per parameter for every precision and optimizer the planner prices, and Llama 2 13B on one "
    "80 GB H100 as a full, 8-bit, LoRA and QLoRA fine-tune, by phase",
    kind="computed",
)
def finetune_memory(device: str) -> Result:
    r = Result("finetune-memory", kind="computed")
    # bytes per parameter, each against the expression its source prints
    cases = (
        ("mixed", "adamw", 2 + 2 + 4 + 4 + 4, "2 + 2 + 4 + 4 + 4 (ZeRO paper)", "bytes_mixed"),
        ("mixed-fp32-grads", "adamw", 2 + 4 + 4 + 4 + 4, "2 + 4 + 12 (Megatron main_grad)", "bytes_fp32_grads"),
        ("mixed-fp32-accum", "adamw", 2 + 2 + 4 + 4 + 4 + 4, "2 + 2 + 4 + 12", "bytes_fp32_accum"),
        ("bf16", "adamw", 2 + 2 + 2 + 2, "2 + 2 + 2 + 2 (torchtune's bf16)", "bytes_pure_bf16"),
        ("mixed-bf16-moments", "adamw", 2 + 4 + 4 + 2 + 2, "2 + 4 + 4 + 2 + 2 (Megatron-Core)", "bytes_bf16_moments"),
        ("mixed", "adamw-8bit", 2 + 2 + 4 + 1 + 1 + 8 / 2048, "2 + 2 + 4 + 1 + 1 + 2 x 4/2048", "bytes_mixed_8bit"),
        ("bf16", "adamw-8bit", 2 + 2 + 1 + 1 + 8 / 2048, "2 + 2 + 1 + 1 + 2 x 4/2048", "bytes_bf16_8bit"),
    )
    rows = []
    for precision, optimizer, expected, expression, key in cases:
        per = state_bytes_per_param(precision, optimizer)
        got = sum(per.values())
        r.add(key, got, "B", f"model state per parameter: {precision}, {optimizer}")
        r.claim(f"{precision} with {optimizer}: {expression} B per parameter", got, expected, rel_tol=1e-12, unit="B")
        rows.append([precision, optimizer, per["params"], per["grads"], f"{per['optimizer']:.4g}", f"{got:.4g}"])
    r.table(
        "bytes",
        ["precision", "optimizer", "weights B", "gradients B", "optimizer state B", "total B per parameter"],
        rows,
        caption="Model state per trained parameter (distlab/data/memory_buffers.toml)",
    )
    nf4_bits = nf4_bytes_per_param() * 8
    r.add("nf4_bits", nf4_bits, "bit", "NF4 with double quantization, bits per parameter")
    r.add("nf4_constant_bits", nf4_bits - 4, "bit", "its quantization constants")
    r.claim("NF4 constants: the QLoRA paper's 0.127 bits per parameter", nf4_bits - 4, 0.127, abs_tol=5e-4, unit="bit")

    # Llama 2 13B on one H100, four ways
    m = preset(MODEL)
    c = cluster("H100-SXM", gpus_per_node=1)
    capacity = device_capacity_bytes(c.gpu)
    adapters = m.layers * lora_params_per_layer(m, LORA_RANK)
    r.add("lora_params", adapters, "params", f"LoRA rank {LORA_RANK} adapters on every linear layer of {MODEL}")
    r.add("lora_share", adapters / m.params(), "", "adapters / base parameters")
    r.claim(
        f"LoRA rank {LORA_RANK} on q, k, v, o, gate, up, down: r x (in + out) summed by hand",
        adapters,
        m.layers * LORA_RANK * (4 * (m.hidden + m.hidden) + 3 * (m.hidden + m.ffn)),
        unit="params",
    )
    ways = []
    for i, (label, kw) in enumerate(WAYS):
        t = _training(**kw)
        mem = memory_per_gpu(m, c, t, PLAN)
        ok = fits(m, c, t, PLAN, mem)
        need = mem.reserved_bytes + mem.outside_allocator_bytes
        tag = ("full", "8bit", "lora", "qlora")[i]
        r.add(f"{tag}_peak_bytes", mem.allocator_peak_bytes, "B", f"{label}: allocator peak")
        r.add(f"{tag}_need_bytes", need, "B", f"{label}: peak + fragmentation + context")
        r.add(f"{tag}_headroom_bytes", capacity - need, "B", f"{label}: what is left of the device")
        r.add(f"{tag}_fits", ok, "", f"{label} fits one GPU")
        ph = mem.phases
        ways.append(
            [
                label,
                f"{mem.weights / 1e9:.1f}",
                f"{mem.gradients / 1e9:.1f}",
                f"{mem.optimizer / 1e9:.1f}",
                f"{ph['forward'] / 1e9:.1f}",
                f"{ph['backward'] / 1e9:.1f}",
                f"{ph['optimizer_step'] / 1e9:.1f}",
                f"{need / 1e9:.1f}",
                "yes" if ok else "no",
            ]
        )
        if tag == "qlora":
            base = m.params() * (4 + 8 / 64 + 32 / (64 * 256)) / 8
            r.claim(
                "QLoRA weights: the NF4 base at 4.127 bits plus bf16 adapters, counted naively",
                mem.weights,
                base + 2 * adapters,
                rel_tol=1e-9,
                unit="B",
            )
            r.claim(
                "QLoRA: reserved + outside the allocator within one H100's reported capacity",
                need,
                capacity,
                relation="<=",
                unit="B",
            )
        if tag == "full":
            r.claim(
                "full AdamW in mixed precision: 16 B x params alone exceed one H100",
                16 * m.params(),
                capacity,
                relation=">=",
                unit="B",
            )
    r.table(
        "thirteen_b",
        [
            "Llama 2 13B, one H100, micro-batch 1, full recompute",
            "weights GB",
            "gradients GB",
            "optimizer GB",
            "forward GB",
            "backward GB",
            "optimizer step GB",
            "needs GB (+ fragmentation, context)",
            "fits",
        ],
        ways,
        caption=f"Computed by distlab.planner.memory; {SEQ}-token sequences, LoRA rank {LORA_RANK}",
    )
    r.add("capacity_bytes", capacity, "B", "an H100's reported capacity")
    return r
