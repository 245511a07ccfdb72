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
