"""Where each parallel group's collectives run, and what they cost: the planner's communication model.

Ranks are laid out as Megatron-Core lays them out: tensor parallelism innermost (consecutive GPUs of a node),
then context, then data (and expert) parallelism, pipeline stages outermost; with hybrid sharding the data-parallel
ranks of one replica (the shard group) are inner to the replicas. So a group of g ranks whose inner dimensions fill
f GPUs has min(g, domain / f) of its ranks in each NVLink domain, and spans the rest of the domains. The domain is
the node on an HGX/DGX and the rack on a GB200 NVL72 (Cluster.domain): what decides NVLink or the network is
whether a group stays inside it, not inside a host.

A collective inside one node runs on NVLink at the bus bandwidth fitted to a published nccl-tests curve
(distlab.hardware.collectives.fitted_bus_bandwidth). A ring across nodes is limited by what each node can push
out: with k of the group's GPUs in a node, k shares of the node's NIC egress (nics x NIC bandwidth / GPUs per
node each: one NIC per GPU on a DGX, so k NICs). A node with a single NIC is the special case this makes
explicit: its eight GPUs share one port. Every collective pays NCCL's own latency for its size and protocol
(distlab.hardware.collectives.nccl_seconds): a message of 1 MiB reaches a fraction of the bandwidth one of
1 GiB does.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from distlab.hardware.collectives import fitted_bus_bandwidth, nccl_seconds
from distlab.hardware.links import Link
from distlab.planner.config import Cluster


@dataclass(frozen=True)
class Group:
    """Where a collective group's ranks sit and the bandwidth its ring gets."""

    ranks: int
    per_node: int
    """Ranks of the group in each NVLink domain (node) it spans."""
    nodes: int
    """NVLink domains the group spans."""
    bus_bytes_per_s: float
    """The Simple protocol's bus bandwidth of the group's ring, per rank and direction."""
    transport: str
    """nvlink (inside one node) or net."""
    arch: str


BLACKWELL = ("B200", "GB200")  # compute capability 10.0 (gpus.toml; the GB200 taken as the B200)


def arch(c: Cluster) -> str:
    """NCCL's per-generation tables (its compCapIndex): Ampere (A100), Hopper (H100, H200), Blackwell (B200, GB200:
    on one node twice Hopper's LL cap)."""
    name = c.gpu.name
    return "ampere" if name.startswith("A100") else "blackwell" if name.startswith(BLACKWELL) else "hopper"


@functools.cache
def intra_bus_bytes_per_s(lk: Link) -> float:
    """The large-message bus bandwidth of a node's GPU-to-GPU link (fitted to nccl-tests; line rate otherwise)."""
    return fitted_bus_bandwidth(lk)


def group(c: Cluster, ranks: int, inner: int) -> Group:
    """The group of `ranks` ranks whose inner dimensions occupy `inner` consecutive GPUs per rank."""
    if ranks <= 1:
        return Group(1, 1, 1, intra_bus_bytes_per_s(c.intra), "nvlink", arch(c))
    per_node = max(1, min(ranks, c.domain // inner)) if inner <= c.domain else 1
    nodes = math.ceil(ranks / per_node)
    intra = intra_bus_bytes_per_s(c.intra)
    span = ranks * inner
    if nodes == 1 and c.domain % span and c.gpus > c.domain:
        # groups of `span` GPUs do not tile the domain (TP 16 in a 72-GPU rack): some straddle two domains, the
        # smallest piece gcd(span, domain) GPUs, and the step waits for the slowest group
        per_node, nodes = max(1, math.gcd(span, c.domain) // inner), 2
    if nodes == 1:
        return Group(ranks, per_node, 1, intra, "nvlink", arch(c))
    egress = per_node * c.nic_bytes_per_s_per_gpu  # the k GPUs' shares of their nodes' NICs (and the fabric's taper)
    return Group(ranks, per_node, nodes, min(intra, egress), "net", arch(c))


@functools.lru_cache(maxsize=65536)
def seconds(op: str, message_bytes: float, g: Group) -> float:
    """One collective of `message_bytes` (nccl-tests' convention) on group g, as NCCL runs it."""
    if g.ranks <= 1 or message_bytes <= 0:
        return 0.0
    return nccl_seconds(
        op,
        message_bytes,
        g.ranks,
        bus_bytes_per_s=g.bus_bytes_per_s,
        nodes=g.nodes,
        intra="nvlink",
        arch=g.arch,
    )


def alltoall_seconds(message_bytes: float, g: Group) -> float:
    """An all-to-all where each rank sends `message_bytes` in all ((ranks - 1)/ranks of it leaves the rank), as
    NCCL's pairwise send/receive: latency of ranks - 1 exchanges, the bytes at the group's bus bandwidth."""
    if g.ranks <= 1 or message_bytes <= 0:
        return 0.0
    return nccl_seconds(
        "all-gather", message_bytes, g.ranks, bus_bytes_per_s=g.bus_bytes_per_s, nodes=g.nodes, arch=g.arch
    )


@functools.cache
def _p2p_latency_s(transport: str) -> float:
    from distlab.core.facts import value

    return value(f"interconnect.nccl-v2-30-latency-{transport}.ring_simple_us") * 1e-6


def p2p_seconds(c: Cluster, message_bytes: float, across_nodes: bool) -> float:
    """One point-to-point send between neighbouring pipeline stages: NCCL's per-step latency and the bytes over
    NVLink, or over the sending GPU's share of its node's NICs."""
    if across_nodes:
        return _p2p_latency_s("net") + message_bytes / c.nic_bytes_per_s_per_gpu
    return _p2p_latency_s("nvlink") + message_bytes / intra_bus_bytes_per_s(c.intra)
