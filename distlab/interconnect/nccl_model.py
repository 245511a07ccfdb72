"""How NCCL picks an algorithm and a protocol: its own tuning model, rebuilt from the sourced tables.

NCCL does not time collectives before choosing how to run them. At init, `ncclTopoTuneModel` (src/graph/tuning.cc)
fills two tables per collective x algorithm x protocol, a latency in µs and a bandwidth in GB/s, and each call takes
the entry with the smallest

    time = latency + bytes / algbw                                      (ncclTopoGetAlgoTime)

This module rebuilds those two tables the way NCCL 2.20.3 (commit b6475625) composes them, from the constants in
distlab/data/interconnect.toml (`nccl-latency-*`, `nccl-factors-v2-20`, `nccl-net-overhead`, `nccl-nvls-v2-20`):

latency (µs), n ranks on N nodes, nsteps = 2(n-1) for all-reduce, n-1 for all-gather / reduce-scatter:
    ring      base + (nsteps - n_inter) * max(intra, net overhead) + n_inter * inter      n_inter = 2N (all-reduce,
              N > 1) or N - 1 (all-gather, reduce-scatter); net overhead x3 for Simple, 0 on one node
    tree      base + 2 * ((n/N - 1) * intra + log2(N) * inter)            (all-reduce only)
    NVLS      intra (+ inter on several nodes), the base is *assigned*, not added (all-reduce, all-gather,
              reduce-scatter on one node in 2.20.3)
bandwidth: busBw = the graph's bandwidth (channels x per-channel bandwidth), then per protocol
    ring LL x 1/4 (all-reduce or several nodes; 1/3 otherwise), capped by llMaxBw; ring LL128 x 0.92 (0.7 at one GPU
    per node); tree x 0.92, then LL x 1/3.8 (capped) or LL128 x 7/9 (one node) / 120/128 (several)
  and busBw -> algbw: ring x n / nsteps, NVLS x 5/6, tree x 1/2.

Inputs NCCL measures at run time and no datasheet gives are made explicit here, each an assumption of the model:
- the graph bandwidth: NCCL's effective NVLink rate on H100 (`nccl-nvlink4`, the maintainer's 370 GB/s of the
  450 GB/s line rate) inside a node; a node's NICs (one 400 Gb/s NDR port per GPU) across nodes;
- graph latencyInter (the network's extra latency from the topology search) = 0;
- the per-channel caps (perChMax*) are ignored: with NCCL's usual 16+ channels on these machines they do not bind;
- NCCL's size-dependent tree correction factors and the ring's multi-node "plateau" factor are left out (they are
  not in the data file); several nodes take the LL cap of their CPU's row (Intel by default, as the DGX H100's
  Xeons, or AMD).

Everything is pure arithmetic (no torch): distlab.interconnect.nccl_algorithms draws and checks it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from distlab.core.facts import value
from distlab.hardware.links import per_direction_bytes_per_s

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter")
ALGORITHMS = ("ring", "tree", "nvls")
PROTOCOLS = ("ll", "ll128", "simple")
VERSION = "2.20.3"  # the tuning.cc whose composition this module follows (latency tables: nccl-latency-*)


@dataclass(frozen=True, kw_only=True)
class Topology:
    """What NCCL's tuner knows about a communicator."""

    ranks: int
    """n: GPUs in the communicator."""
    nodes: int
    """N: nodes they sit on (ranks / nodes per node)."""
    graph_bytes_per_s: float
    """The ring/tree graph's bus bandwidth (nChannels x per-channel bandwidth), bytes/s per direction."""
    intra_transport: str = "nvlink"
    """nvlink or pci: which hwLat row the intra-node steps use."""
    nvswitch_multicast: bool = False
    """Third-generation NVSwitch with CUDA multicast (NVLS possible)."""
    cpu_vendor: str = "intel"
    """intel or amd: NCCL's network post overhead per step (nccl-net-overhead)."""
    label: str = ""

    def __post_init__(self) -> None:
        for name in ("ranks", "nodes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"Topology.{name} must be a positive integer, got {v!r}")
        if self.ranks % self.nodes:
            raise ValueError(f"{self.ranks} ranks do not split evenly over {self.nodes} nodes")
        if not self.graph_bytes_per_s > 0:
            raise ValueError(f"graph_bytes_per_s must be positive, got {self.graph_bytes_per_s!r}")
        if self.intra_transport not in ("nvlink", "pci"):
            raise ValueError(f"intra_transport must be nvlink or pci, not {self.intra_transport!r}")
        if self.cpu_vendor not in ("intel", "amd"):
            raise ValueError(f"cpu_vendor must be intel or amd, not {self.cpu_vendor!r}")

    @property
    def ranks_per_node(self) -> int:
        return self.ranks // self.nodes


def nvlink_node(ranks: int = 8) -> Topology:
    """One HGX/DGX H100 node: NVLink 4 through NVSwitch at NCCL's effective rate, NVLS available."""
    return Topology(
        ranks=ranks,
        nodes=1,
        graph_bytes_per_s=value("interconnect.nccl-nvlink4.effective_gbytes_per_s") * 1e9,
        nvswitch_multicast=True,
        label=f"{ranks} H100, one node (NVLink 4, NVSwitch)",
    )


def ib_cluster(nodes: int, gpus_per_node: int = 8, nic: str = "InfiniBand-NDR") -> Topology:
    """`nodes` DGX H100 nodes, one NIC per GPU: a ring channel leaves the node through one NIC, and the node's
    channels together reach min(NVLink effective rate, NICs x NIC rate)."""
    nvl = value("interconnect.nccl-nvlink4.effective_gbytes_per_s") * 1e9
    nics = value("interconnect.DGX-H100.compute_nics")
    bw = min(nvl, nics * per_direction_bytes_per_s(nic))
    return Topology(
        ranks=nodes * gpus_per_node,
        nodes=nodes,
        graph_bytes_per_s=bw,
        nvswitch_multicast=True,
        label=f"{nodes * gpus_per_node} H100 on {nodes} nodes ({nics} x {nic} per node)",
    )


# ---------------------------------------------------------------- the sourced tables
def hw_latency_us(transport: str, algorithm: str, protocol: str) -> float:
    """hwLat[transport][algorithm][protocol]: NCCL's per-step latency (nccl-latency-<transport>)."""
    field = f"{'nvls' if algorithm == 'nvls' else algorithm}_{protocol}_us"
    return value(f"interconnect.nccl-latency-{transport}.{field}")


def base_latency_us(algorithm: str, protocol: str) -> float:
    """baseLat[algorithm][protocol]: a fixed cost per call (0 for NVLS)."""
    if algorithm == "nvls":
        return value("interconnect.nccl-latency-base.base_nvls_us")
    return value(f"interconnect.nccl-latency-base.base_{algorithm}_{protocol}_us")


def _factor(name: str) -> float:
    return value(f"interconnect.nccl-factors-v2-20.{name}")


@functools.cache  # pure in its (hashable) arguments; the data files do not change during a run
def available(collective: str, algorithm: str, protocol: str, topo: Topology) -> bool:
    """Whether NCCL 2.20.3 offers this (algorithm, protocol) for `collective` on `topo`."""
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; known: {', '.join(COLLECTIVES)}")
    if algorithm not in ALGORITHMS or protocol not in PROTOCOLS:
        raise ValueError(f"unknown algorithm/protocol {algorithm!r}/{protocol!r}")
    if topo.ranks < 2:
        return False
    if algorithm == "tree":
        return collective == "all-reduce"  # all-gather and reduce-scatter: ring, NVLS or CollNet only
    if algorithm == "nvls":
        nvls_multi_node = value("interconnect.nccl-nvls-v2-20.multi_node")
        return (
            protocol == "simple"  # nccl-nvls-v2-20.protocols
            and topo.nvswitch_multicast
            and topo.ranks >= value("interconnect.nccl-nvls-v2-20.min_gpus")
            and (topo.nodes == 1 or nvls_multi_node)
        )
    return True


@functools.cache  # pure in its (hashable) arguments; the data files do not change during a run
def latency_us(collective: str, algorithm: str, protocol: str, topo: Topology) -> float:
    """NCCL's latency term for one call, µs (see the module docstring)."""
    n, nodes = topo.ranks, topo.nodes
    nsteps = 2 * (n - 1) if collective == "all-reduce" else n - 1
    n_inter = (2 * nodes if nodes > 1 else 0) if collective == "all-reduce" else nodes - 1
    intra = hw_latency_us(topo.intra_transport, algorithm, protocol)
    inter = hw_latency_us("net", algorithm, protocol)  # + graph latencyInter, taken as 0 (and again for Simple)
    base = base_latency_us(algorithm, protocol)
    if algorithm == "ring":
        overhead = 0.0
        if nodes > 1:
            overhead = value(f"interconnect.nccl-net-overhead.net_overhead_{topo.cpu_vendor}_us")
            overhead *= 3 if protocol == "simple" else 1
        return base + (nsteps - n_inter) * max(intra, overhead) + n_inter * inter
    if algorithm == "tree":
        return base + 2 * ((topo.ranks_per_node - 1) * intra + int(math.log2(nodes)) * inter)
    return intra + (inter if nodes > 1 else 0.0)  # NVLS: assigned, no base


@functools.cache  # pure in its (hashable) arguments; the data files do not change during a run
def bus_bandwidth(collective: str, algorithm: str, protocol: str, topo: Topology) -> float:
    """NCCL's busBw after its per-protocol refinements, bytes/s."""
    bus = topo.graph_bytes_per_s
    index2 = min(topo.nodes, 3) - 1  # caps are indexed [1 node, 2 nodes, more]
    # one node: the GPU's row; several: the CPU's (llMaxBws row 0 Intel, row 1 AMD, which are Volta's and Ampere's)
    ll_cap_row = "hopper" if topo.nodes == 1 else ("ampere" if topo.cpu_vendor == "amd" else "volta")
    ll_cap = value(f"interconnect.nccl-factors-v2-20.ll_max_gbytes_per_s_{ll_cap_row}")[index2] * 1e9
    if algorithm == "ring" and protocol == "ll":
        quarter = topo.nodes > 1 or collective == "all-reduce"
        f = _factor("ring_ll_busbw_factor_multinode_or_reduce" if quarter else "ring_ll_busbw_factor_single_node")
        bus = min(ll_cap, bus * f)
    if algorithm == "ring" and protocol == "ll128":
        one_gpu = topo.ranks_per_node < 2
        bus *= _factor("ring_ll128_busbw_factor_one_gpu_per_node" if one_gpu else "ring_ll128_busbw_factor")
    if algorithm == "tree":
        bus *= _factor("tree_busbw_factor")
        if protocol == "ll":
            bus = min(bus * _factor("tree_ll_busbw_factor"), ll_cap)
        if protocol == "ll128":
            single = topo.nodes == 1
            bus *= _factor("tree_ll128_busbw_factor_single_node" if single else "tree_ll128_busbw_factor_multi_node")
    return bus


@functools.cache  # pure in its (hashable) arguments; the data files do not change during a run
def algorithm_bandwidth(collective: str, algorithm: str, protocol: str, topo: Topology) -> float:
    """algbw, bytes/s: what `bytes / algbw` divides by (busBw -> algbw: ring n/nsteps, NVLS 5/6, tree 1/2)."""
    bus = bus_bandwidth(collective, algorithm, protocol, topo)
    n = topo.ranks
    if algorithm == "ring":
        nsteps = 2 * (n - 1) if collective == "all-reduce" else n - 1
        return bus * n / nsteps
    if algorithm == "nvls":
        return bus * _factor("nvls_algbw_ratio")
    return bus * _factor("tree_algbw_ratio")


def time_seconds(collective: str, algorithm: str, protocol: str, message_bytes: float, topo: Topology) -> float:
    """NCCL's predicted seconds for one call: latency + bytes / algbw. `message_bytes` in nccl-tests' convention
    (all-reduce: the buffer; all-gather / reduce-scatter: the whole gathered output or scattered input)."""
    if not message_bytes >= 0:
        raise ValueError(f"message_bytes must be >= 0, got {message_bytes!r}")
    if not available(collective, algorithm, protocol, topo):
        raise ValueError(f"NCCL {VERSION} offers no {algorithm}/{protocol} {collective} on {topo.label or topo}")
    lat = latency_us(collective, algorithm, protocol, topo) * 1e-6
    return lat + message_bytes / algorithm_bandwidth(collective, algorithm, protocol, topo)


def choices(collective: str, topo: Topology) -> list[tuple[str, str]]:
    """Every (algorithm, protocol) NCCL may pick for `collective` on `topo`."""
    return [(a, p) for a in ALGORITHMS for p in PROTOCOLS if available(collective, a, p, topo)]


def best(collective: str, message_bytes: float, topo: Topology) -> tuple[str, str, float]:
    """(algorithm, protocol, seconds) NCCL's model picks: the smallest predicted time."""
    return min(
        ((a, p, time_seconds(collective, a, p, message_bytes, topo)) for a, p in choices(collective, topo)),
        key=lambda x: x[2],
    )


# ---------------------------------------------------------------- where the choice changes
def crossover_bytes(collective: str, first: tuple[str, str], second: tuple[str, str], topo: Topology) -> float:
    """The size at which `second` becomes as fast as `first`: both times are linear in S (t = L + S / W), so
    L1 + S / W1 = L2 + S / W2 gives S = (L2 - L1) / (1/W1 - 1/W2). inf when they never cross."""
    l1, l2 = (latency_us(collective, a, p, topo) * 1e-6 for a, p in (first, second))
    w1, w2 = (algorithm_bandwidth(collective, a, p, topo) for a, p in (first, second))
    slope = 1 / w1 - 1 / w2
    if slope <= 0 or l2 <= l1:
        return math.inf
    return (l2 - l1) / slope


def winners(collective: str, topo: Topology, lo_bytes: float = 1.0, hi_bytes: float = 2.0**36) -> list[dict]:
    """The lower envelope of the predicted times from lo to hi bytes: which choice wins on which range, and the
    exact size where each hand-over happens (walked analytically: from the current winner, the next is the
    choice whose crossover comes first)."""
    cur = best(collective, lo_bytes, topo)[:2]
    out, start = [], lo_bytes
    while True:
        nxt = [(crossover_bytes(collective, cur, c, topo), c) for c in choices(collective, topo) if c != cur]
        nxt = [(s, c) for s, c in nxt if start < s < hi_bytes]
        if not nxt:
            out.append({"algorithm": cur[0], "protocol": cur[1], "from_bytes": start, "to_bytes": hi_bytes})
            return out
        s, c = min(nxt)
        out.append({"algorithm": cur[0], "protocol": cur[1], "from_bytes": start, "to_bytes": s})
        cur, start = c, s


def label(algorithm: str, protocol: str) -> str:
    """'Ring/LL128', 'NVLS/Simple': how NCCL's tuning table names them."""
    names = {"ring": "Ring", "tree": "Tree", "nvls": "NVLS", "ll": "LL", "ll128": "LL128", "simple": "Simple"}
    return f"{names[algorithm]}/{names[protocol]}"
