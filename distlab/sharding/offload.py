"""CPU offload: what crossing PCIe every step costs, and when it pays (ZeRO-Offload, Ren et al. 2021,
https://arxiv.org/abs/2101.06840).

Two ways to keep the optimizer state in host memory:

- swap: copy the rank's optimizer-state shard to the GPU for the update and back after it. Each step moves
  the shard both ways over the GPU's PCIe link: 12⌈Ψ/N⌉ bytes each way in mixed precision.
- ZeRO-Offload: run the update on the CPU where the state lives. Per step the GPU sends its bf16
  gradient shard down (2⌈Ψ/N⌉ bytes) and receives the updated bf16 parameters (2⌈Ψ/N⌉ bytes); the CPU
  reads gradients, master weights, m and v and writes master weights, m, v and the bf16 parameters back:
  a memory-bound pass over host DRAM.

Either costs time the GPU spends waiting unless it overlaps with compute (ZeRO-Offload's one-step delayed
update overlaps the CPU step with the next forward and backward). Compute per step is 6Ψ·T FLOP for T tokens
per GPU (forward 2, backward 4); at the datasheet peak that is its least, so the break-even tokens below are
an upper bound: at a model FLOP utilisation u they shrink by u.
"""

from __future__ import annotations

from distlab.core.facts import fact
from distlab.sharding.zero import bytes_per_param_by_state, model_state_bytes_per_gpu

PCIE = "PCIe5-x16"
NODE = "DGX-H100-host"
GPU = "H100-SXM"


def socket_memory_bytes_per_s(cpu: str) -> float:
    """Peak DRAM bandwidth of one socket: channels x transfers per second x bytes per transfer."""
    f = lambda field: fact(f"host_links.{cpu}.{field}").value
    return f("memory_channels") * f("mtransfers_per_s") * 1e6 * f("channel_bytes")


def node_memory_bytes_per_s(node: str = NODE) -> float:
    cpu = fact(f"host_links.{node}.cpu").value
    return fact(f"host_links.{node}.sockets").value * socket_memory_bytes_per_s(cpu)


def cpu_adam_bytes_per_param() -> int:
    """Host DRAM bytes one CPU AdamW update touches per parameter: read the bf16 gradient and the optimizer
    state, write the optimizer state and the bf16 parameters (2 + 12 + 12 + 2 in mixed precision)."""
    per = bytes_per_param_by_state("mixed")
    return per["grads"] + 2 * per["optimizer"] + per["params"]


def offload_seconds(
    params: int, gpus: int, *, gpus_per_node: int, pcie_bytes_per_s: float, host_bytes_per_s: float
) -> dict[str, float]:
    """Seconds per step of swapping the optimizer state over PCIe, and of ZeRO-Offload's transfers and
    CPU update, for a node of `gpus_per_node` GPUs (ZeRO-2 shards, mixed precision).

    PCIe is full duplex: what goes down and what comes up move at once, each at the per-direction
    bandwidth, on each GPU's own link. Every byte that crosses PCIe also crosses host DRAM, which the
    node's GPUs share with the CPU update: a transfer takes the longer of the two.
    """
    m = model_state_bytes_per_gpu(params, gpus, 2)
    off = model_state_bytes_per_gpu(params, gpus, 2, offload_optimizer=True)
    node = min(gpus, gpus_per_node)  # GPUs whose shards this node's host memory serves
    swap_pcie = m["optimizer_bytes"] / pcie_bytes_per_s
    swap_dram = 2 * node * m["optimizer_bytes"] / host_bytes_per_s  # out and back in
    grads = off["host_grads_bytes"]  # bf16 gradients down; the same number of bf16 parameter bytes come up
    transfer = max(grads / pcie_bytes_per_s, 2 * node * grads / host_bytes_per_s)
    cpu = node * -(-params // gpus) * cpu_adam_bytes_per_param() / host_bytes_per_s
    return {
        "swap_pcie_s": swap_pcie,
        "swap_dram_s": swap_dram,
        "swap_s": max(swap_pcie, swap_dram),
        "transfer_s": transfer,
        "cpu_update_s": cpu,
        "zero_offload_s": transfer + cpu,
    }


def compute_seconds(params: int, tokens: int, flops_per_s: float) -> float:
    """6Ψ·T FLOP of forward and backward for T tokens on one GPU at `flops_per_s`."""
    return 6 * params * tokens / flops_per_s
