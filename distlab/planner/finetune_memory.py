"""What fine-tuners run, in bytes: each precision's and optimizer's model state per parameter, QLoRA's NF4 base, and
Llama 2 13B on one 80 GB GPU four ways (full AdamW, 8-bit AdamW, LoRA, QLoRA), each priced by phase.

Every bytes-per-parameter figure is claimed against the expression its source prints (the ZeRO paper's 2 + 2 + 12,
torchtune's all-bf16 state, Megatron-Core's precision-aware optimizer, bitsandbytes' 8-bit blocks, the QLoRA paper's
4 + 0.127 bits), so a typo in distlab/data/memory_buffers.toml fails the page. Pure Python.
"""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.models.shapes import ModelShape, preset
from distlab.planner.config import FRAGMENTATION_FRACTION, Plan, Training, cluster, device_capacity_bytes
from distlab.planner.memory import (
    fits,
    lora_params_per_layer,
    loss_bytes_per_logit,
    memory_per_gpu,
    nf4_bytes_per_param,
    state_bytes_per_param,
)
from distlab.planner.memory_quotes import FUSED_LOSS_GRADIENT, quoted

MODEL = "13B"
SEQ = 4096  # an input: the sequence length the 13B table is priced at (its caption states it)
LORA_RANK = 16  # an input: the adapters' rank (the page states it)
MICRO_BATCH = 1  # an input: sequences per micro-batch (the page states it)
# (label, Training overrides): the four ways practice 1 weighs; micro-batch 1, full recomputation (what fits first)
WAYS: tuple[tuple[str, dict[str, str]], ...] = (
    ("full AdamW, mixed precision", {}),
    ("full, pure bf16 + 8-bit AdamW", {"precision": "bf16", "optimizer": "adamw-8bit"}),
    ("LoRA (bf16 base)", {"peft": "lora"}),
    ("QLoRA (NF4 base)", {"peft": "qlora"}),
)
PLAN = Plan(micro_batch=MICRO_BATCH, microbatches=64, recompute="full")


def _training(**kw) -> Training:
    return Training(global_batch_tokens=64 * SEQ, seq=SEQ, task="finetune", lora_rank=LORA_RANK, **kw)


# ---------------------------------------------------------------- the 13B table again, by hand
def by_hand(m: ModelShape) -> dict[str, dict[str, float]]:
    """Each way's weights, gradients, optimizer state, phases, need and fit, in bytes, written out for one GPU with no
    parallelism from the shape and the sources' numbers: an independent reference for the 13B table (it calls nothing
    in distlab.planner.memory). Chapter 12's phases: gradients accumulate over the 64 micro-batches, so they are alive
    from the forward on; Megatron's fused loss (the planner's default stack)."""
    h, f, vocab, layers, s, b, r = m.hidden, m.ffn, m.vocab, m.layers, SEQ, MICRO_BATCH, LORA_RANK
    # parameters: per layer q, k, v, o (h x h: 13B has as many key/value heads as query heads), gate, up, down
    # (h x f) and two RMSNorm weights; the embedding and the untied output head (V x h) and the final norm
    params = layers * (4 * h * h + 3 * h * f + 2 * h) + 2 * vocab * h + h
    adapters = layers * r * (4 * (h + h) + 3 * (h + f))  # r (d_in + d_out) on q, k, v, o, gate, up, down
    nf4 = (4 + 8 / 64 + 32 / (64 * 256)) / 8  # QLoRA: 4 bits, an 8-bit constant per 64, an fp32 one per 256 of those
    w, g, o = 2, 2, 4 + 4 + 4  # mixed: bf16 weight and gradient; fp32 master, momentum, variance (ZeRO's K = 12)
    states = {  # (weights, gradients, optimizer state)
        "full": (w * params, g * params, o * params),
        "8bit": (2 * params, 2 * params, 2 * (1 + 4 / 2048) * params),  # bf16; 1-byte moments, fp32 per 2048 each
        "lora": (2 * params + w * adapters, g * adapters, o * adapters),  # a frozen bf16 base: weights only
        "qlora": (nf4 * params + w * adapters, g * adapters, o * adapters),
    }
    kept = layers * 2 * s * b * h  # full recomputation keeps each layer's bf16 input: 2sbh
    # a layer rebuilt in backward (FlashAttention: the attention core checkpointed, its q, k, v kept): 2sbh for the
    # two norms' inputs, the q/k/v projections' input, q, k, v, the output projection's input and the gate/up
    # input; 4sb for each RMSNorm's fp32 1/rms; 2sbf for the SiLU input and output, the up projection, down's input
    rebuilt = 8 * 2 * s * b * h + 2 * 4 * s * b + 4 * 2 * s * b * f
    logits = s * b * vocab
    loss_forward = quoted("memory_buffers.loss-fused.forward_bytes_per_logit")  # the fp32 softmax
    loss_backward = quoted("memory_buffers.loss-fused.forward_bytes_per_logit", FUSED_LOSS_GRADIENT)
    capacity = quoted("planner.capacity-H100-SXM.reported_mib") * 2**20  # MiB: 2^20 bytes
    outside = FRAGMENTATION_FRACTION * capacity + quoted("planner.memory-reserve.cuda_context_mib") * 2**20
    out = {}
    for way, (weights, grads, opt) in states.items():
        working = max(rebuilt, 2 * h * f) if way == "qlora" else rebuilt  # QLoRA dequantizes a matrix to bf16
        forward = weights + opt + grads + kept + loss_forward * logits
        backward = max(
            forward + loss_backward * logits,  # the loss's backward: the logits' gradients too
            weights + opt + grads + kept + working,  # the first layer backward reaches, rebuilt
            weights + opt + grads + kept / layers + working,  # backward's end: the first layer's input left
        )
        step = weights + grads + opt
        need = max(forward, backward, step) + outside
        out[way] = {
            "weights": weights,
            "gradients": grads,
            "optimizer": opt,
            "forward": forward,
            "backward": backward,
            "optimizer_step": step,
            "need": need,
            "headroom": capacity - need,
            "fits": float(need <= capacity),
        }
    out["model"] = {"params": params, "adapters": adapters, "nf4_bits": 8 * nf4, "capacity": capacity}
    return out


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
    m = preset(MODEL)
    hand = by_hand(m)
    nf4_bits = nf4_bytes_per_param() * 8
    constant_bits = nf4_bits - 4
    r.add("nf4_bits", nf4_bits, "bit", "NF4 with double quantization, bits per parameter")
    r.add("nf4_constant_bits", constant_bits, "bit", "its quantization constants")
    r.claim("NF4: 4 + 8/64 + 32/(64 x 256) bits per parameter", nf4_bits, hand["model"]["nf4_bits"], rel_tol=1e-12)
    r.claim("NF4 constants: the QLoRA paper's 0.127 bits per parameter", constant_bits, 0.127, abs_tol=5e-4, unit="bit")

    # Llama 2 13B on one H100, four ways, each cell claimed against by_hand
    c = cluster("H100-SXM", gpus_per_node=1)
    capacity = device_capacity_bytes(c.gpu)
    adapters = m.layers * lora_params_per_layer(m, LORA_RANK)
    share = adapters / m.params()
    r.add("lora_rank", LORA_RANK, "", "the adapters' rank (an input)")
    r.add("micro_batch", MICRO_BATCH, "", "sequences per micro-batch (an input)")
    r.add("fragmentation", FRAGMENTATION_FRACTION, "fraction", "assumed: the allocator's fragmentation margin")
    r.add("lora_params", adapters, "params", f"LoRA rank {LORA_RANK} adapters on every linear layer of {MODEL}")
    r.add("lora_share", share, "", "adapters / base parameters")
    counted = hand["model"]
    r.claim(
        f"LoRA rank {LORA_RANK} on q, k, v, o, gate, up, down: r x (in + out) summed by hand",
        adapters,
        counted["adapters"],
        unit="params",
    )
    r.claim(
        "LoRA share: adapters / base parameters, both counted by hand",
        share,
        counted["adapters"] / counted["params"],
        rel_tol=1e-12,
    )
    r.claim(
        "H100 capacity: nvidia-smi's 81559MiB quoted from NVIDIA/nccl issue 1264, x 2^20",
        capacity,
        counted["capacity"],
        unit="B",
    )
    ways, disagree = [], 0
    for i, (label, kw) in enumerate(WAYS):
        t = _training(**kw)
        mem = memory_per_gpu(m, c, t, PLAN)
        ok = fits(m, c, t, PLAN, mem)
        need = mem.reserved_bytes + mem.outside_allocator_bytes
        headroom = capacity - need
        tag = ("full", "8bit", "lora", "qlora")[i]
        r.add(f"{tag}_peak_bytes", mem.allocator_peak_bytes, "B", f"{label}: allocator peak")
        r.add(f"{tag}_need_bytes", need, "B", f"{label}: peak + fragmentation + context")
        r.add(f"{tag}_headroom_bytes", headroom, "B", f"{label}: what is left of the device")
        r.add(f"{tag}_fits", ok, "", f"{label} fits one GPU")
        ph = mem.phases
        cells = [
            mem.weights / 1e9,
            mem.gradients / 1e9,
            mem.optimizer / 1e9,
            ph["forward"] / 1e9,
            ph["backward"] / 1e9,
            ph["optimizer_step"] / 1e9,
            need / 1e9,
        ]
        ways.append([label, *(f"{x:.1f}" for x in cells), "yes" if ok else "no"])
        ref = hand[tag]
        keys = ("weights", "gradients", "optimizer", "forward", "backward", "optimizer_step", "need")
        r.claim(
            f"{label}: weights, gradients, optimizer, forward, backward, step and need GB = by hand (worst gap)",
            max(abs(x / (ref[k] / 1e9) - 1) for x, k in zip(cells, keys)),
            0.0,
            abs_tol=1e-9,
        )
        disagree += float(ok) != ref["fits"]
        if tag == "qlora":
            r.claim(
                "QLoRA headroom: the quoted capacity less its need by hand",
                headroom,
                ref["headroom"],
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
            r.claim(
                "CUDA context: the 723 MiB the PyTorch forum thread quotes, x 2^20",
                mem.context,
                quoted("planner.memory-reserve.cuda_context_mib") * 2**20,
                unit="B",
            )
            forward_bytes, backward_bytes = loss_bytes_per_logit(t.framework, t.loss)
            r.claim(
                "Megatron's fused loss after forward: the fp32 softmax, 4 B per logit as its source says",
                forward_bytes,
                quoted("memory_buffers.loss-fused.forward_bytes_per_logit"),
                unit="B",
            )
            r.claim(
                "Megatron's fused loss at its backward: + the bf16 gradient, 2 B per logit as its source says",
                backward_bytes,
                quoted("memory_buffers.loss-fused.forward_bytes_per_logit", FUSED_LOSS_GRADIENT),
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
    r.claim("fits column: rows whose yes/no differs from need by hand <= the quoted capacity", disagree, 0)
    r.table(
        "thirteen_b",
        [
            f"Llama 2 13B, one H100, micro-batch {MICRO_BATCH}, full recompute",
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
