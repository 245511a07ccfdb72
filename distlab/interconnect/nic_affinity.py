"""gpu-nic-affinity: what it costs when a GPU's network traffic does not use the NIC beside it.

NCCL classifies every GPU-NIC path by its worst hop (topo.h): PIX (one PCIe switch), PXB (several switches, no host
bridge), PHB (through the CPU's host bridge), SYS (across the CPU-to-CPU link, UPI or Infinity Fabric). GPUDirect RDMA,
the NIC reading and writing GPU memory itself, is used only up to NCCL_NET_GDR_LEVEL (default PXB); beyond it the
data is staged through host memory. And the path's bandwidth is its slowest hop's.

Primary link rates for UPI and xGMI could not be read (notes/facts.md); what exists is NCCL's own model of the
CPU-to-CPU link (nccl-smp-*, topo.h at v2.30.7): the bandwidth its graph search assumes for a path through it. This
module prices the paths with those inputs, so the numbers say what NCCL itself believes, not a datasheet:

    path bandwidth = min(GPU's PCIe link, NIC port, SMP link if the path crosses sockets)

and puts the result into the ring model of distlab.hardware.collectives (one NIC per GPU, DGX H100's layout).
"""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.facts import entries, value
from distlab.core.results import Quantity, Result
from distlab.hardware.collectives import link_time_seconds
from distlab.hardware.links import Link, link, per_direction_bytes_per_s
from distlab.interconnect import nccl_source_checks, placement_checks

NIC = "InfiniBand-NDR"
GPU_PCIE = "PCIe5-x16"  # H100 SXM's host link
SMP = {  # NCCL's CPU-to-CPU link model, by CPU (interconnect.toml nccl-smp-*)
    "Intel Sapphire Rapids": "nccl-smp-intel-sapphire-rapids",
    "Intel Emerald Rapids": "nccl-smp-intel-emerald-rapids",
    "AMD (any)": "nccl-smp-amd",
    "Intel Skylake": "nccl-smp-intel-skylake",
}
PATHS = ("PIX", "PXB", "PHB", "SYS")
ALLREDUCE_BYTES, ALLREDUCE_GPUS = 1e9, 64  # the page's example: a 1 GB all-reduce over 8 nodes of 8
SHARING = 4  # GPUs of one socket whose NICs are all on the other socket, sharing its CPU-to-CPU link


def gdr_used(path: str, level: str | None = None) -> bool:
    """Whether NCCL uses GPUDirect RDMA on a GPU-NIC path of type `path` (at most NCCL_NET_GDR_LEVEL)."""
    order = value("host_links.nccl-path-types.order")
    level = level or value("host_links.nccl-gdr-default.default_level")
    if path not in order or level not in order:
        raise ValueError(f"unknown path type {path!r} or level {level!r}; known: {', '.join(order)}")
    return order.index(path) <= order.index(level)


def path_bytes_per_s(path: str, smp_entry: str = SMP["Intel Sapphire Rapids"], nic: str = NIC) -> float:
    """A GPU-NIC path's bandwidth, bytes/s per direction: its slowest hop."""
    hops = [per_direction_bytes_per_s(GPU_PCIE), per_direction_bytes_per_s(nic)]
    if path == "SYS":
        hops.append(value(f"interconnect.{smp_entry}.inter_socket_gbytes_per_s") * 1e9)
    return min(hops)


def ring_link(per_gpu_bytes_per_s: float, gpus_per_node: int = 8) -> Link:
    """A flat ring over several nodes with one channel per GPU and NIC: min(NVLink, g x path bandwidth)."""
    nvl, ib = link("NVLink4-H100"), link(NIC)
    return Link(
        name="ring through the NICs",
        bandwidth_bytes_per_s=min(nvl.bandwidth_bytes_per_s, gpus_per_node * per_gpu_bytes_per_s),
        alpha_s=ib.alpha_s,
        transport="net",
    )


@experiment(
    "gpu-nic-affinity",
    "GPU-NIC paths (PIX, PXB, PHB, SYS), GPUDirect RDMA, and the bandwidth cost of crossing the CPU interconnect "
    "with NCCL's own link model",
    kind="computed",
)
def gpu_nic_affinity(device: str) -> Result:
    r = Result("gpu-nic-affinity", kind="computed")
    nccl_source_checks.nccl_source_claim(r)  # NCCL's SMP-link figures against topo.h
    nic = per_direction_bytes_per_s(NIC)
    pcie = per_direction_bytes_per_s(GPU_PCIE)
    r.add("nic_bytes_per_s", nic, "B/s", "one NDR port, per direction")
    r.add("pcie_bytes_per_s", pcie, "B/s", "the GPU's PCIe 5 x16, per direction")
    meaning = {
        "PIX": "GPU and NIC under one PCIe switch",
        "PXB": "through several PCIe switches, not the host bridge",
        "PHB": "through the CPU's PCIe host bridge (same socket)",
        "SYS": "across the CPU-to-CPU link to the other socket",
    }
    rows = []
    for p in PATHS:
        bw = path_bytes_per_s(p)
        rows.append([p, meaning[p], "yes" if gdr_used(p) else "no: staged through host memory", Quantity(bw, "B/s")])
    r.table(
        "paths",
        ["path type", "what it crosses", "GPUDirect RDMA at the default level", "path bandwidth (NCCL's model)"],
        rows,
        caption=f"NCCL path types (topo.h) and GDR level {value('host_links.nccl-gdr-default.default_level')} "
        "(paths.cc); the SYS row uses NCCL's Sapphire Rapids SMP figure (DGX H100's CPUs); computed",
    )
    r.claim(
        "default GDR level PXB: GPUDirect RDMA on PIX and PXB paths, not on PHB or SYS",
        sum(gdr_used(p) for p in PATHS),
        2,
        formula="paths.cc: netGdrLevel = PATH_PXB; path order from topo.h",
    )
    smp_rows = []
    for cpu, entry in SMP.items():
        smp = value(f"interconnect.{entry}.inter_socket_gbytes_per_s") * 1e9
        smp_rows.append([cpu, Quantity(smp, "B/s"), f"{100 * min(smp, nic) / nic:.0f} %"])
    r.table(
        "smp",
        ["CPU", "NCCL's CPU-to-CPU link model", "a far NIC's bandwidth / a near NIC's"],
        smp_rows,
        caption="interconnect.toml nccl-smp-* (NCCL's graph-search inputs, topo.h/topo.cc at v2.30.7; not "
        "datasheet UPI or xGMI rates, which could not be sourced)",
    )
    far = path_bytes_per_s("SYS")
    near = path_bytes_per_s("PIX")
    r.add("near_bytes_per_s", near, "B/s", "a NIC on the GPU's PCIe switch")
    r.add("far_bytes_per_s", far, "B/s", "a NIC on the other socket (Sapphire Rapids, NCCL's model)")
    r.add("far_over_near", far / near, "fraction", "far / near")
    r.claim(
        "the near path is the NIC's port rate (PCIe 5 x16 is faster than NDR)",
        near,
        nic,
        rel_tol=1e-12,
        unit="B/s",
    )
    r.claim(
        "the far path is NCCL's SMP figure for Sapphire Rapids (slower than both PCIe and the NIC)",
        far,
        value("interconnect.nccl-smp-intel-sapphire-rapids.inter_socket_gbytes_per_s") * 1e9,
        rel_tol=1e-12,
        unit="B/s",
    )
    # Four GPUs of one socket whose NICs are all on the other socket share one CPU-to-CPU link.
    shared = far / SHARING
    r.add("shared_far_bytes_per_s", shared, "B/s", "each of 4 GPUs sharing the SMP link to far NICs")

    # What it does to a 1 GB all-reduce over 8 nodes x 8 GPUs (a flat ring, one channel per GPU/NIC).
    size, ranks = ALLREDUCE_BYTES, ALLREDUCE_GPUS
    t_near = link_time_seconds("all-reduce", size, ranks, ring_link(near))
    t_far = link_time_seconds("all-reduce", size, ranks, ring_link(far))
    t_shared = link_time_seconds("all-reduce", size, ranks, ring_link(shared))
    r.add("allreduce_near_s", t_near, "s", "1 GB all-reduce, 64 GPUs, every GPU on its near NIC")
    r.add("allreduce_far_s", t_far, "s", "the same, every GPU through a far NIC")
    r.add("allreduce_shared_s", t_shared, "s", "the same, 4 GPUs per socket sharing one SMP link")
    r.claim(
        "1 GB all-reduce: far/near time = near/far path bandwidth (bandwidth regime)",
        t_far / t_near,
        min(link("NVLink4-H100").bandwidth_bytes_per_s, 8 * near) / (8 * far),
        rel_tol=0.05,
        formula="t ≈ 2(p-1)/p · S/B; the 2(p-1) latency steps add a few %",
    )
    placement_checks.gpu_nic_paths_claim(r, (ALLREDUCE_BYTES, ALLREDUCE_GPUS, SHARING), SMP)
    gdr = entries("host_links")["gdr-prerequisites"]
    r.table(
        "gdr",
        ["for GPUDirect RDMA", "what must hold"],
        [["kernel side", gdr["kernel_side"]], ["PCIe ACS", gdr["acs"]], ["how to see it", gdr["check"]]],
        caption="Prerequisites as NCCL's maintainers state them (NVIDIA/nccl issues 1412 and 928)",
    )
    return r
