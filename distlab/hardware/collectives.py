"""The alpha-beta cost model of collectives, and the links it is evaluated on.

A collective over p ranks that moves S bytes costs (Hockney's model, as used for MPI collectives by
Thakur, Rabenseifner and Gropp 2005, "Optimization of Collective Communication Operations in MPICH")

    t = steps(p) * alpha + factor(p) * S / B

alpha: the fixed cost of one step (one hop of a ring, one level of a tree), seconds.
B:     the bandwidth of one rank's link, bytes per second *per direction* (a link sends and receives at
       once; NVIDIA's "900 GB/s" NVLink figure is both directions summed, 450 GB/s each way).
S:     the message size in nccl-tests' convention (doc/PERFORMANCE.md): the buffer each rank reduces for
       all-reduce, the *whole* gathered output for all-gather, the whole input for reduce-scatter, all
       bytes one rank sends for all-to-all, the buffer for broadcast.

factor(p) is exactly nccl-tests' "bus bandwidth" correction: algbw = S / t and busbw = algbw * factor, so
busbw is the link bandwidth the collective achieved, comparable across rank counts.

| op             | algorithm | steps(p)       | factor(p)   | note
|----------------|-----------|----------------|-------------|------------------------------------------
| all-reduce     | naive     | 2 (p - 1)      | 2 (p - 1)   | gather to rank 0 and send back: one link
| all-reduce     | ring      | 2 (p - 1)      | 2 (p - 1)/p | reduce-scatter, all-gather (Patarasuk 2009)
| all-reduce     | tree      | 2 ceil(log2 p) | 2           | pipelined double binary tree (NCCL's model)
| all-gather     | ring      | p - 1          | (p - 1)/p   |
| reduce-scatter | ring      | p - 1          | (p - 1)/p   |
| all-to-all     | ring      | p - 1          | (p - 1)/p   | pairwise exchange: p - 1 rounds of S/p
| broadcast      | ring      | p - 1          | 1           | pipelined chain: the root sends all S once

The model ignores contention beyond one link per rank, protocol switches (NCCL's LL/LL128/Simple) and the
overlap of phases, so it is a planning tool, not a simulator: distlab.interconnect.collective_fit checks it against
real collectives and reports the residuals.
"""

from __future__ import annotations

import functools
import math

from distlab.hardware.links import Link, _as_link

OPS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "broadcast")
ALGORITHMS = {"all-reduce": ("ring", "tree", "naive")} | {op: ("ring",) for op in OPS[1:]}


def steps_and_factor(op: str, ranks: int, algorithm: str = "ring") -> tuple[int, float]:
    """(latency steps, bandwidth factor) of `op` on `ranks` ranks: t = steps * alpha + factor * S / B."""
    if op not in ALGORITHMS:
        raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")
    if algorithm not in ALGORITHMS[op]:
        raise ValueError(f"{op} has no algorithm {algorithm!r}; known: {', '.join(ALGORITHMS[op])}")
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks must be a positive integer, got {ranks!r}")
    p = ranks
    if p == 1:
        return 0, 0.0
    if op == "all-reduce":
        if algorithm == "naive":
            return 2 * (p - 1), 2.0 * (p - 1)
        if algorithm == "tree":
            return 2 * math.ceil(math.log2(p)), 2.0
        return 2 * (p - 1), 2.0 * (p - 1) / p
    if op == "broadcast":
        return p - 1, 1.0
    return p - 1, (p - 1) / p


def bus_bandwidth_factor(op: str, ranks: int, algorithm: str = "ring") -> float:
    """nccl-tests' busbw / algbw for `op` (the bandwidth factor of the ring algorithms)."""
    return steps_and_factor(op, ranks, "ring" if algorithm == "naive" else algorithm)[1]


def time_seconds(
    op: str, message_bytes: float, ranks: int, *, alpha_s: float, bandwidth_bytes_per_s: float, algorithm: str = "ring"
) -> float:
    """Predicted seconds for one collective `op` of `message_bytes` over `ranks` ranks.

    `alpha_s` is the per-step latency, `bandwidth_bytes_per_s` one rank's link bandwidth per direction.
    """
    if not message_bytes >= 0:
        raise ValueError(f"message_bytes must be >= 0, got {message_bytes!r}")
    if not alpha_s >= 0:
        raise ValueError(f"alpha_s must be >= 0, got {alpha_s!r}")
    if not bandwidth_bytes_per_s > 0:
        raise ValueError(f"bandwidth_bytes_per_s must be > 0, got {bandwidth_bytes_per_s!r}")
    steps, factor = steps_and_factor(op, ranks, algorithm)
    return steps * alpha_s + factor * message_bytes / bandwidth_bytes_per_s


def crossover_bytes(ranks: int, *, alpha_s: float, bandwidth_bytes_per_s: float) -> float:
    """Message size below which tree all-reduce beats ring (ring's extra latency steps outweigh its
    smaller bandwidth factor); 0 when the tree never wins."""
    s_ring, f_ring = steps_and_factor("all-reduce", ranks, "ring")
    s_tree, f_tree = steps_and_factor("all-reduce", ranks, "tree")
    extra_latency = (s_ring - s_tree) * alpha_s
    if extra_latency <= 0:
        return 0.0
    return extra_latency * bandwidth_bytes_per_s / (f_tree - f_ring)


def link_time_seconds(op: str, message_bytes: float, ranks: int, on: str | Link, algorithm: str = "ring") -> float:
    """time_seconds with alpha and B taken from a link."""
    lk = _as_link(on)
    return time_seconds(
        op,
        message_bytes,
        ranks,
        alpha_s=lk.alpha_s,
        bandwidth_bytes_per_s=lk.bandwidth_bytes_per_s,
        algorithm=algorithm,
    )


# ---------------------------------------------------------------- hierarchical all-reduce
def hierarchical_allreduce_phases(
    message_bytes: float,
    gpus_per_node: int,
    nodes: int,
    *,
    intra: str | Link = "NVLink4-H100",
    inter: str | Link = "InfiniBand-NDR",
) -> dict[str, float]:
    """Seconds of each phase of a two-level all-reduce of `message_bytes` on nodes x gpus_per_node GPUs:

    1. reduce-scatter inside each node (g ranks, intra link): each GPU ends with S/g bytes of the node's sum;
    2. all-reduce of those S/g bytes across nodes (n ranks, inter link), g such rings in parallel, one
       per GPU and its own NIC (a rail-optimised fabric, as DGX H100's eight NICs give);
    3. all-gather inside each node (g ranks, intra link).

    Phases are summed: NCCL pipelines them, so a real run lies between the largest phase and the sum.
    """
    for label, v in (("gpus_per_node", gpus_per_node), ("nodes", nodes)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{label} must be a positive integer, got {v!r}")
    a, b = _as_link(intra), _as_link(inter)
    g, n = gpus_per_node, nodes
    return {
        "reduce-scatter (intra)": link_time_seconds("reduce-scatter", message_bytes, g, a),
        "all-reduce (inter)": link_time_seconds("all-reduce", message_bytes / g, n, b),
        "all-gather (intra)": link_time_seconds("all-gather", message_bytes, g, a),
    }


def hierarchical_allreduce_seconds(
    message_bytes: float,
    gpus_per_node: int,
    nodes: int,
    *,
    intra: str | Link = "NVLink4-H100",
    inter: str | Link = "InfiniBand-NDR",
) -> float:
    """Predicted seconds of a two-level all-reduce (see hierarchical_allreduce_phases)."""
    return sum(hierarchical_allreduce_phases(message_bytes, gpus_per_node, nodes, intra=intra, inter=inter).values())


# ---------------------------------------------------------------- NCCL's protocols: bus bandwidth by message size
# A measured bus bandwidth is not one number: at 1 MiB eight H100s reach about 40-70 GB/s, at 64 MiB about 360.
# NCCL picks, per call, the protocol its tuner predicts fastest (tuning.cc, ncclTopoTuneModel):
#
#   LL      8-byte lines of 4 B data + 4 B flag: lowest latency, half the bandwidth (and a per-arch cap)
#   LL128   128-byte lines of 120 B data: 0.92 of the bandwidth, medium latency
#   Simple  raw data with separate synchronisation: all of the bandwidth, the highest latency
#
# each costing  latency(p) + factor x S / bandwidth(p),  latency(p) = base(p) + intra steps x hwLat(intra, p) +
# inter steps x hwLat(net, p) (the tuner's own constants, interconnect.toml), and the call takes the fastest.
# What the tuner does not know is the large-message bus bandwidth a link reaches; that one number is fitted, per
# link, to a published nccl-tests curve (nccl_tests.toml): `fitted_bus_bandwidth`. Everything else is NCCL's.
PROTOCOLS = ("ll", "ll128", "simple")
LL128_FACTOR_ENTRY = "interconnect.nccl-factors-v2-30.ring_ll128_busbw_factor"
LL_FACTOR_ENTRY = "interconnect.nccl-factors-v2-30.ring_ll_busbw_factor"


@functools.cache
def _ll_cap_bytes_per_s(arch: str, nodes: int) -> float:
    """NCCL's cap on LL bandwidth, llMaxBws[index1][index2] (tuning.cc at 2.30.7): index2 is 1 node, 2, more; index1
    the GPU's generation on one node and the hosts' CPU vendor on several ("for multi-node, we look at CPU type"):
    row 1 for AMD hosts, row 0 otherwise. The planner's hosts are Intel's (DGX H100's Xeons, whose post overhead it
    charges) or Grace (GB200's Arm): row 0. Ampere keeps 2.20's table: its own row on one node, the AMD row (DGX
    A100's EPYC hosts) on several."""
    from distlab.core.facts import value

    if arch == "ampere":
        table = value("interconnect.nccl-factors-v2-20.ll_max_gbytes_per_s_ampere")
    else:
        table = value(f"interconnect.nccl-factors-v2-30.ll_max_gbytes_per_s_{arch if nodes == 1 else 'volta'}")
    return table[min(nodes, 3) - 1] * 1e9


@functools.cache
def protocol_latency_s(op: str, ranks: int, nodes: int, protocol: str, intra: str = "nvlink") -> float:
    """NCCL's predicted latency of one ring collective (tuning.cc at 2.30.7): base + (steps - inter steps) x
    max(intra hwLat, network post overhead) + inter steps x net hwLat, where the ring all-reduce takes 2(n-1)
    steps of which 2(nodes-1) cross nodes, all-gather and reduce-scatter n-1 and nodes-1. Simple pays the post
    overhead three times and the network latency twice (its flush), as the tuner does; with one rank per node the
    tuner takes the tree's network latency."""
    from distlab.core.facts import value

    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, not {protocol!r}")
    if ranks <= 1:
        return 0.0
    steps = 2 * (ranks - 1) if op == "all-reduce" else ranks - 1
    inter = 0 if nodes <= 1 else (2 * (nodes - 1) if op == "all-reduce" else nodes - 1)
    base = value(f"interconnect.nccl-v2-30-latency-base.base_ring_{protocol}_us")
    hw_intra = value(f"interconnect.nccl-v2-30-latency-{intra}.ring_{protocol}_us")
    if nodes > 1:
        overhead = value("interconnect.nccl-net-overhead.net_overhead_intel_us") * (3 if protocol == "simple" else 1)
        hw_intra = max(hw_intra, overhead)
    # one rank per node: tuning.cc takes the tree's network latency ("With ppn=1 latencies are fully exposed")
    row = "tree" if ranks == nodes else "ring"
    hw_net = value(f"interconnect.nccl-v2-30-latency-net.{row}_{protocol}_us") * (2 if protocol == "simple" else 1)
    return (base + (steps - inter) * hw_intra + inter * hw_net) * 1e-6


@functools.cache
def _factor(entry: str) -> float:
    from distlab.core.facts import value

    return value(entry)


@functools.cache
def protocol_bandwidths(bus_bytes_per_s: float, *, nodes: int = 1, arch: str = "hopper") -> dict[str, float]:
    """Bus bandwidth of each protocol from the Simple one: LL128 0.92 of it, LL half of it up to NCCL's cap."""
    ll = min(_factor(LL_FACTOR_ENTRY) * bus_bytes_per_s, _ll_cap_bytes_per_s(arch, nodes))
    return {"ll": ll, "ll128": _factor(LL128_FACTOR_ENTRY) * bus_bytes_per_s, "simple": bus_bytes_per_s}


def nccl_seconds(
    op: str,
    message_bytes: float,
    ranks: int,
    *,
    bus_bytes_per_s: float,
    nodes: int = 1,
    intra: str = "nvlink",
    arch: str = "hopper",
) -> float:
    """Seconds of one ring collective as NCCL runs it: the fastest protocol's latency + factor x S / bandwidth.
    `bus_bytes_per_s` is the Simple protocol's bus bandwidth of the ring (per rank, per direction)."""
    if not message_bytes >= 0:
        raise ValueError(f"message_bytes must be >= 0, got {message_bytes!r}")
    if not bus_bytes_per_s > 0:
        raise ValueError(f"bus_bytes_per_s must be > 0, got {bus_bytes_per_s!r}")
    _, factor = steps_and_factor(op, ranks)
    if ranks <= 1:
        return 0.0
    bws = protocol_bandwidths(bus_bytes_per_s, nodes=nodes, arch=arch)
    return min(protocol_latency_s(op, ranks, nodes, p, intra) + factor * message_bytes / bws[p] for p in PROTOCOLS)


def nccl_bus_bandwidth(op: str, message_bytes: float, ranks: int, **kw) -> float:
    """The bus bandwidth nccl-tests would print for this call: factor x S / t."""
    _, factor = steps_and_factor(op, ranks)
    return factor * message_bytes / nccl_seconds(op, message_bytes, ranks, **kw)


def curve_times_s(name: str) -> list[tuple[float, float]]:
    """(bytes, seconds) of a published curve (nccl_tests.toml): the faster of its out-of-place and in-place
    columns (a slow outlier is noise on a shared machine, never a faster network), from algbw where no time is
    printed."""
    from distlab.core.facts import entries

    c = entries("nccl_tests")[name]
    out = []
    for i, size in enumerate(c["bytes"]):
        if "time_us" in c:
            t = min(c["time_us"][i], c.get("inplace_time_us", c["time_us"])[i]) * 1e-6
        else:
            t = size / (c["algbw_gbps"][i] * 1e9)
        out.append((float(size), t))
    return out


FIT_FROM_BYTES = 16 * 2**20  # the bandwidth-bound end of a curve: from 16 MiB the latency is < 15 % of the time


def fit_bus_bandwidth(name: str, *, from_bytes: float = FIT_FROM_BYTES, arch: str = "hopper") -> float:
    """The Simple bus bandwidth that makes nccl_seconds best reproduce curve `name` (least squares in log time
    over its sizes from `from_bytes`), by golden-section search: the one fitted constant of the link model."""
    from distlab.core.facts import entries

    c = entries("nccl_tests")[name]
    points = [(s, t) for s, t in curve_times_s(name) if s >= from_bytes]
    op = {"all_reduce": "all-reduce", "all_gather": "all-gather", "reduce_scatter": "reduce-scatter"}[c["collective"]]

    def loss(bus: float) -> float:
        # fsum, correctly rounded: near the minimum the loss is flat, so a last-bit difference in the sum decides
        # the search's comparisons, and plain sum() rounds differently in CPython 3.12+ (compensated) than in 3.11
        kw = {"bus_bytes_per_s": bus, "nodes": c["nodes"], "arch": arch}
        return math.fsum(math.log(nccl_seconds(op, s, c["ranks"], **kw) / t) ** 2 for s, t in points)

    lo, hi = 1e9, 2e12
    g = (math.sqrt(5) - 1) / 2
    for _ in range(100):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if loss(a) < loss(b):
            hi = b
        else:
            lo = a
    return (lo + hi) / 2


def curve_errors(name: str, bus_bytes_per_s: float, *, arch: str = "hopper") -> list[tuple[float, float]]:
    """(bytes, predicted / published - 1) at every size of curve `name`."""
    from distlab.core.facts import entries

    c = entries("nccl_tests")[name]
    op = {"all_reduce": "all-reduce", "all_gather": "all-gather", "reduce_scatter": "reduce-scatter"}[c["collective"]]
    kw = {"bus_bytes_per_s": bus_bytes_per_s, "nodes": c["nodes"], "arch": arch}
    return [(s, nccl_seconds(op, s, c["ranks"], **kw) / t - 1) for s, t in curve_times_s(name)]


def _curve_arch(name: str) -> str:
    from distlab.core.facts import entries

    c = entries("nccl_tests")[name]
    return "ampere" if str(c.get("gpu", c.get("gpu_printed", ""))).startswith("A100") else "hopper"


def bus_bandwidth_curve(link_name: str) -> str | None:
    """The published nccl-tests curve that calibrates a node's link: one measured inside one node on that link by
    nccl-tests itself, preferring one that meets the corpus brief (1 KiB to 1 GiB and more)."""
    from distlab.core.facts import entries

    found = [
        k
        for k, c in entries("nccl_tests").items()
        if c.get("link") == link_name and c.get("scope") == "intra-node" and "tool" not in c
    ]
    found.sort(key=lambda k: entries("nccl_tests")[k].get("meets_brief", True) is False)
    return found[0] if found else None


@functools.cache
def fitted_bus_bandwidth(lk: Link | str) -> float:
    """The large-message bus bandwidth of `lk`: fitted to its nccl-tests curve where one is on file (NVLink 4:
    8 x H100, NVLink 3: 8 x A100), the link's per-direction line rate otherwise (network ports, whose only
    published multi-node sweep does not say which network it ran on; NVLink 5, not measured here)."""
    lk = _as_link(lk)
    name = bus_bandwidth_curve(lk.name)
    if name is None:
        return lk.bandwidth_bytes_per_s
    return fit_bus_bandwidth(name, arch=_curve_arch(name))
