"""The sentences the memory references rest on: a typed field of distlab/data against the number its source's own
sentence prints (transcribed apart into the source's detail), shared by the by-hand references of chapters 1, 13
and 14 (finetune_memory, memory_outcomes, worked_plan_checks). Pure Python, no experiment."""

from __future__ import annotations

from distlab.core import facts

QUOTES = {
    # typed field: the number its source's own sentence prints, as transcribed into that source's detail
    "planner.capacity-H100-SXM.reported_mib": r"0MiB / ([0-9]+)MiB",  # nvidia-smi's total
    "planner.memory-reserve.cuda_context_mib": r"from zero to ([0-9]+) MiB",  # the first CUDA call's context
    "memory_buffers.loss-fused.forward_bytes_per_logit": r"vocab-parallel loss saves the fp32 softmax \(([0-9]+) B\)",
}
FUSED_LOSS_GRADIENT = r"then casts it to bf16 \(([0-9]+) B\)"  # the loss's backward adds the logits' gradient


def quoted(path: str, pattern: str = "") -> float:
    """The number a typed field's source prints in its own sentence (distlab.core.facts.quoted), by default with
    the pattern QUOTES names for it."""
    return facts.quoted(path, pattern or QUOTES[path])


NCCL_QUOTES = {
    "simple_buffsize_bytes": r"Default is ([0-9]+) \(4 MB\)",
    "ll_buffsize_bytes": r"sizeof\(ncclLLFifoLine\) \(16\) = ([0-9,]+) B",
    "ll128_buffsize_bytes": r"x 8 = ([0-9,]+) B",
}
A100_MIB = r"A100 80GB ([0-9,]+) MiB"  # NVML's total for the A100 80GB, in the capacity source's table


def nccl_by_hand() -> float:
    """One NCCL communicator's buffers on one GPU: 32 channels (NCCL issue 1685's log), a ring's and a tree's
    connection each, one buffer per protocol (Simple, LL, LL128), each size as NCCL's sources print it."""
    return 32 * 2 * sum(quoted(f"memory_buffers.nccl-defaults.{k}", q) for k, q in NCCL_QUOTES.items())
