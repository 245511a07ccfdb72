"""Claims that pin the planner's communication model (distlab.planner.comms) to cases worked by hand, for every
page that shows the planner's numbers (chapters 12-14 and, through them, the Plan page).

Issue 26's guard audit found that a wrong rank count in `group` or a wrong NIC share moved every step time on
those pages and no claim saw it: each case below states where a group's ranks sit, what bandwidth its ring gets and
what a send costs on 8 nodes of 8 H100s with one 400 Gb/s NDR NIC per GPU, from the datasheets, not from comms.
"""

from __future__ import annotations

from distlab.core.facts import value
from distlab.core.results import Result, worst_relative_gap
from distlab.interconnect.nccl_tuning_checks import ring_seconds_by_hand
from distlab.planner.comms import alltoall_seconds, group, p2p_seconds, seconds
from distlab.planner.config import cluster

# (ranks, GPUs its inner dimensions fill per rank) -> (ranks per node, nodes): Megatron's order, by hand
LAYOUTS = ((2, 1, 2, 1), (8, 1, 8, 1), (16, 4, 2, 8), (8, 8, 1, 8), (2, 16, 1, 2))


def comms_by_hand(r: Result) -> None:
    c = cluster("H100-SXM", nodes=8)
    nic = value("interconnect.InfiniBand-NDR.gbits_per_s_per_direction") * 1e9 / 8  # one NIC per GPU
    for ranks, inner, per_node, nodes in LAYOUTS:
        g = group(c, ranks, inner)
        r.claim(
            f"{ranks} ranks {inner} GPUs apart on 8-GPU nodes: (ranks, per node, nodes) by hand",
            (g.ranks, g.per_node, g.nodes) == (ranks, per_node, nodes),
            True,
            formula=f"{ranks} ranks x {inner} GPUs = {per_node} per node on {nodes} node(s)",
        )
        if nodes > 1:
            r.claim(
                f"{ranks} ranks across {nodes} nodes: ring bandwidth = {per_node} GPUs' NICs (below NVLink)",
                g.bus_bytes_per_s,
                per_node * nic,
                rel_tol=1e-12,
                unit="B/s",
            )
    node = group(c, 8, 1)  # one node's NVLink ring, NCCL 2.30.7's tuner by hand: LL, LL128, LL128 and Simple win
    for op, size in (("all-reduce", 2**20), ("all-gather", 2**22), ("reduce-scatter", 2**24), ("all-reduce", 2**30)):
        r.claim(
            f"8 ranks on one node, {op} of {size:,} B: NCCL's ring, each protocol priced by hand (tuning.cc)",
            seconds(op, size, node),
            ring_seconds_by_hand(op, size, 8, node.bus_bytes_per_s, "hopper"),
            rel_tol=1e-12,
            unit="s",
        )
    for ranks, inner in ((16, 1), (16, 4), (8, 8)):  # across nodes: 2 nodes of 8 ranks, 8 of 2, 8 of 1
        g = group(c, ranks, inner)
        for op, size in (("all-reduce", 2**16), ("all-gather", 2**22), ("all-reduce", 2**30)):
            r.claim(
                f"{ranks} ranks on {g.nodes} nodes, {op} of {size:,} B: NCCL's ring priced by hand (tuning.cc)",
                seconds(op, size, g),
                ring_seconds_by_hand(op, size, ranks, g.bus_bytes_per_s, "hopper", g.nodes),
                rel_tol=1e-12,
                unit="s",
            )
    pair = group(c, 2, 1)
    r.claim(
        "2 ranks on one node, all-reduce of 65,536 B: NCCL's ring priced by hand (tuning.cc), its latency dominant",
        seconds("all-reduce", 2**16, pair),
        ring_seconds_by_hand("all-reduce", 2**16, 2, pair.bus_bytes_per_s, "hopper"),
        rel_tol=1e-12,
        unit="s",
    )
    r.claim(
        "2 ranks, 1 GB all-reduce: at least the bytes a 2-rank ring moves, 2(N-1)/N x S = S, at its bandwidth",
        seconds("all-reduce", 1e9, pair),
        1e9 / pair.bus_bytes_per_s,
        relation=">=",
        unit="s",
    )
    r.claim(
        "2 ranks, 1 GB all-to-all: at least the half that leaves each rank, at the ring's bandwidth",
        alltoall_seconds(1e9, pair),
        0.5e9 / pair.bus_bytes_per_s,
        relation=">=",
        unit="s",
    )
    r.claim(
        "a 100 MB send between nodes = NCCL's net step latency + 100 MB over one NDR NIC",
        p2p_seconds(c, 1e8, True),
        value("interconnect.nccl-v2-30-latency-net.ring_simple_us") / 1e6 + 1e8 / nic,
        rel_tol=1e-12,
        unit="s",
    )
    r.claim(
        "a 100 MB send inside a node = NVLink's latency + 100 MB at NVLink 4's 450 GB/s per direction, within 10 %",
        p2p_seconds(c, 1e8, False),
        value("interconnect.nccl-v2-30-latency-nvlink.ring_simple_us") / 1e6
        + 1e8 / (value("interconnect.NVLink4-H100.bidirectional_gbytes_per_s") * 1e9 / 2),
        rel_tol=0.1,
        unit="s",
        formula="the planner sends at the bus bandwidth fitted to nccl-tests (a few % above the line rate)",
    )


# GB200 NVL72 racks (4 racks, one NDR NIC per GPU): (trays used per rack, ranks, GPUs apart) -> (per domain, domains)
NVL72_LAYOUTS = (
    (16, 16, 1, 16, 1),  # TP 16 inside a 64-GPU domain
    (16, 16, 8, 8, 2),  # 16 ranks 8 apart span 128 GPUs: two domains of 8
    (16, 4, 64, 1, 4),  # one rank a domain
    (18, 8, 8, 1, 2),  # 8 ranks 8 apart span 64 GPUs, which do not tile 72: a group straddles, gcd(64, 72) = 8 GPUs
    (18, 2, 1, 2, 1),  # TP 2: a pair of neighbours
)
NVL72_COLLECTIVES = (  # (layout index, collective, bytes)
    (0, "all-reduce", 2**20),
    (0, "all-gather", 2**24),
    (1, "all-reduce", 2**16),
    (1, "all-reduce", 2**30),
    (2, "all-gather", 2**22),
    (3, "all-reduce", 2**20),
    (4, "all-gather", 2**24),
    (4, "reduce-scatter", 2**24),
)


def nvl72_comms_by_hand(r: Result, racks) -> None:
    """The planner's groups on GB200 NVL72 racks (the NVLink domain, not the 4-GPU tray, is the unit a ring stays
    inside) and NCCL's ring on them, Blackwell's row of tuning.cc on one domain and the Intel/Arm hosts' row on several,
    worked by hand: one claim, the worst relative gap over each group's ranks per domain, domains and ring bandwidth
    (NVLink 5 per direction inside a domain, the NICs of the GPUs one domain holds across) and eight collectives.
    `racks(trays)`: 4 racks of that many trays (parallel_rules.nvl72)."""
    nvlink = value("interconnect.NVLink5-B200.bidirectional_gbytes_per_s") * 1e9 / 2
    nic = value("interconnect.InfiniBand-NDR.gbits_per_s_per_direction") * 1e9 / 8
    pairs, groups = [], []
    for trays, ranks, inner, per_domain, domains in NVL72_LAYOUTS:
        g = group(racks(trays), ranks, inner)
        groups.append(g)
        bus = nvlink if domains == 1 else min(nvlink, per_domain * nic)
        pairs += [(g.per_node, per_domain), (g.nodes, domains), (g.bus_bytes_per_s, bus)]
    for i, op, size in NVL72_COLLECTIVES:
        g = groups[i]
        hand = ring_seconds_by_hand(op, size, g.ranks, g.bus_bytes_per_s, "blackwell", g.nodes)
        pairs.append((seconds(op, size, g), hand))
    r.claim(
        "GB200 racks: 5 groups and 8 collectives by hand (NCCL's tuner): worst gap",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-12,
    )
