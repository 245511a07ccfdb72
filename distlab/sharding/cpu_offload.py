"""CPU offload of the optimizer state, 7B on 8 GPUs: PCIe and CPU time per step and when it pays
(experiment cpu-offload), from the formulas of distlab.sharding.offload."""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.facts import fact
from distlab.core.results import Quantity, Result
from distlab.hardware.gpus import data_claims
from distlab.hardware.links import per_direction_bytes_per_s
from distlab.models.shapes import preset
from distlab.sharding.offload import (
    GPU,
    NODE,
    PCIE,
    compute_seconds,
    cpu_adam_bytes_per_param,
    node_memory_bytes_per_s,
    offload_seconds,
    socket_memory_bytes_per_s,
)
from distlab.sharding.offload_checks import by_hand
from distlab.sharding.zero import model_state_bytes_per_gpu

TOKENS = (512, 2048, 8192, 32768, 131072)  # the per-step table's tokens per GPU (inputs its first column prints)


@experiment(
    "cpu-offload", "CPU offload of the optimizer state: PCIe and CPU time per step, 7B on 8 GPUs", kind="computed"
)
def cpu_offload(device: str) -> Result:
    r = Result("cpu-offload")
    data_claims(r, [GPU])  # its bf16 peak and memory enter the page's numbers
    n, gpus = preset("7B").params(), fact(f"host_links.{NODE}.gpus").value
    pcie = per_direction_bytes_per_s(PCIE)
    host = node_memory_bytes_per_s()
    peak = fact(f"gpus.{GPU}.bf16_dense_tflops").value * 1e12
    hbm = fact(f"gpus.{GPU}.hbm_gb").value * 1e9
    t = offload_seconds(n, gpus, gpus_per_node=gpus, pcie_bytes_per_s=pcie, host_bytes_per_s=host)
    r.add("params", n, "params", "Llama 2 7B parameters")
    r.add("gpus", gpus, "GPUs", "GPUs (one DGX H100 node)")
    r.add("pcie_bytes_per_s", pcie, "B/s", "PCIe 5.0 x16, per direction")
    r.add("host_bytes_per_s", host, "B/s", "host DRAM bandwidth of the node (both sockets)")
    r.add(
        "socket_bytes_per_s",
        socket_memory_bytes_per_s(fact(f"host_links.{NODE}.cpu").value),
        "B/s",
        "DRAM bandwidth of one socket",
    )
    r.add("cpu_adam_bytes_per_param", cpu_adam_bytes_per_param(), "B/param", "host bytes a CPU update touches")
    for k, v in t.items():
        r.add(k, v, "s", k.replace("_", " "))
    states = model_state_bytes_per_gpu(n, gpus, 2)
    off = model_state_bytes_per_gpu(n, gpus, 2, offload_optimizer=True)
    r.add("optimizer_shard_bytes", states["optimizer_bytes"], "B", "optimizer-state shard per GPU")
    r.add("grad_shard_bytes", off["host_grads_bytes"], "B", "bf16 gradient shard per GPU")
    r.add("freed_bytes", states["total_bytes"] - off["total_bytes"], "B", "GPU memory ZeRO-2 offload frees")
    r.add("z2_bytes", states["total_bytes"], "B", "ZeRO-2 model states per GPU")
    r.add("z2_offload_bytes", off["total_bytes"], "B", "ZeRO-2 + offload model states per GPU")
    r.add("host_per_node_bytes", gpus * off["host_bytes"], "B", "host memory the node needs for offload")
    r.add("swap_over_offload", t["swap_s"] / t["zero_offload_s"], "", "swap time / ZeRO-Offload time")
    rows = []
    for tokens in TOKENS:
        c = compute_seconds(n, tokens, peak)
        rows.append(
            [
                tokens,
                Quantity(c, "s"),
                Quantity(t["swap_s"], "s"),
                t["swap_s"] / c,
                Quantity(t["zero_offload_s"], "s"),
                t["zero_offload_s"] / c,
            ]
        )
    r.table(
        "per_step",
        [
            "tokens per GPU per step",
            "compute at peak",
            "swap",
            "swap / compute",
            "ZeRO-Offload",
            "ZeRO-Offload / compute",
        ],
        rows,
        caption=f"Llama 2 7B on {gpus} H100 SXM, ZeRO-2, one step; compute at the datasheet bf16 peak "
        "(the shortest compute time possible), so the ratios are upper bounds",
    )
    for name, key in (("swap", "swap_s"), ("zero_offload", "zero_offload_s")):
        r.add(
            f"breakeven_tokens_{name}",
            t[key] * peak / (6 * n),
            "tokens",
            f"tokens per GPU per step at which {name} time equals compute at peak",
        )
    # Cross-checks of the inputs against independent statements of the same facts.
    bidir = fact(f"interconnect.{PCIE}.bidirectional_gbytes_per_s").value * 1e9
    r.claim(
        "PCIe 5.0 x16 per direction (spec encoding) vs H100 datasheet's bidirectional / 2",
        pcie,
        bidir / 2,
        rel_tol=0.02,
        unit="B/s",
        formula="32 GT/s x 16 lanes x 128/130 / 8; the datasheet rounds",
    )
    r.claim(
        "ZeRO-2 + offload leaves the bf16 parameters alone on the GPU",
        off["total_bytes"],
        off["params_bytes"],
        unit="B",
        formula="2Ψ (ZeRO-Offload paper, Figure 2)",
    )
    _one_gpu(r, n, pcie, host, hbm)
    by_hand(r, TOKENS)
    return r


def _one_gpu(r: Result, n: int, pcie: float, host: float, hbm: float) -> None:
    """The case offload was made for: the states do not fit one GPU without it."""
    alone = model_state_bytes_per_gpu(n, 1, 0)
    off = model_state_bytes_per_gpu(n, 1, 2, offload_optimizer=True)
    t = offload_seconds(n, 1, gpus_per_node=1, pcie_bytes_per_s=pcie, host_bytes_per_s=host)
    r.add("one_gpu_bytes", alone["total_bytes"], "B", "one GPU, no offload: model states")
    r.add("one_gpu_offload_bytes", off["total_bytes"], "B", "one GPU, ZeRO-Offload: GPU model states")
    r.add("one_gpu_host_bytes", off["host_bytes"], "B", "one GPU, ZeRO-Offload: host bytes")
    r.add("one_gpu_offload_s", t["zero_offload_s"], "s", "one GPU, ZeRO-Offload: seconds per step")
    r.add("one_gpu_transfer_s", t["transfer_s"], "s", "one GPU: PCIe seconds per step")
    r.add("one_gpu_cpu_s", t["cpu_update_s"], "s", "one GPU: CPU update seconds per step")
    r.claim(
        "one GPU: the states do not fit without offload",
        alone["total_bytes"],
        hbm,
        relation=">=",
        unit="B",
        formula="16Ψ vs the GPU's memory",
    )
    r.claim(
        "one GPU: with ZeRO-Offload they do",
        off["total_bytes"],
        hbm,
        relation="<=",
        unit="B",
        formula="2Ψ vs the GPU's memory",
    )
