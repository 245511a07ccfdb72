"""NCCL 2.20.3's tuning tables worked a second way, for the appendix's table, quantities and hand-overs.

`ncclTopoTuneModel` (src/graph/tuning.cc at b6475625, lines 158-265) is transcribed here statement by statement, in
its own loop order, with every constant read from the C text as copied by machine into source_excerpts.toml
(nccl_source_checks.readings_v2_20), not from interconnect.toml; the graph's bandwidth is the NCCL maintainer's
effective NVLink 4 rate, capped across nodes by the DGX H100's eight NICs at NDR's port rate (the QM9700 manual),
each from its own sentence. distlab.interconnect.nccl_model builds the same tables in its own shape from the typed
entries; the appendix claims each of its cells and hand-overs against these.

The model's stated assumptions are kept: the graph's latencyInter is 0, its pattern is not
NCCL_TOPO_PATTERN_TREE, and the per-channel caps (perChMax*) do not bind; NVLS runs on one node only (2.20.3 skips
it when nNodes > 1, nccl-nvls-v2-20's detail).
"""

from __future__ import annotations

import math
import re
from typing import Any

from distlab.core.facts import entries, quoted
from distlab.interconnect.nccl_source_checks import CHIPS, quoted_rates, readings_v2_20, readings_v2_30, said
from distlab.sharding.zero_checks import ndr_bytes_per_s

ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER = "all-reduce", "all-gather", "reduce-scatter"
TREE, RING, NVLS = "tree", "ring", "nvls"  # NCCL_ALGO_*, the three the model offers
LL, LL128, SIMPLE = "ll", "ll128", "simple"  # NCCL_PROTO_*


def graph_bytes_per_s(nodes: int) -> float:
    """nChannels x bw: NCCL's effective NVLink 4 rate in a node; across nodes no more than the node's NICs carry."""
    nvlink = quoted_rates()["nccl-nvlink4.effective_gbytes_per_s"] * 1e9
    if nodes == 1:
        return nvlink
    nics = quoted("interconnect.DGX-H100.compute_nics", r"(eight) single-port")
    return min(nvlink, nics * ndr_bytes_per_s())


def tune_model(n_ranks: int, n_nodes: int, cpu_vendor: str = "intel") -> dict[tuple[str, str, str], dict]:
    """{(collective, algorithm, protocol): latency_us, bus (busBw after the refinements), algbw}, in bytes/s."""
    c: dict[str, Any] = readings_v2_20(entries("source_excerpts")["nccl-tuning-v2-20"]["text"])

    def factor(name: str) -> float:
        return float(c[f"nccl-factors-v2-20.{name}"])

    def hw_lat(transport: str, a: str, p: str) -> float:
        return float(c[f"nccl-latency-{transport}.{a}_{p}_us"])

    bw = graph_bytes_per_s(n_nodes)
    index2 = n_nodes - 1 if n_nodes <= 2 else 2
    # LL: for a single node the GPU's row (Hopper), for several the CPU's (Intel: row 0, AMD: row 1)
    row = "hopper" if n_nodes == 1 else ("ampere" if cpu_vendor == "amd" else "volta")
    ll_max_bw = c[f"nccl-factors-v2-20.ll_max_gbytes_per_s_{row}"][index2] * 1e9
    ppn = n_ranks / n_nodes
    out: dict[tuple[str, str, str], dict] = {}
    for coll in (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER):
        nsteps = 2 * (n_ranks - 1) if coll == ALL_REDUCE else n_ranks - 1
        n_inter_steps = (2 * n_nodes if n_nodes > 1 else 0) if coll == ALL_REDUCE else n_nodes - 1
        for a in (TREE, RING, NVLS):
            if (coll != ALL_REDUCE and a == TREE) or (a == NVLS and n_nodes > 1):
                continue
            for p in (LL, LL128, SIMPLE):
                if a == NVLS and p != SIMPLE:
                    continue
                bus = bw
                if a == RING and p == LL:
                    quarter = n_nodes > 1 or coll == ALL_REDUCE
                    bus = min(
                        ll_max_bw,
                        bus * factor("ring_ll_busbw_factor_" + ("multinode_or_reduce" if quarter else "single_node")),
                    )
                if a == RING and p == LL128:
                    bus *= factor("ring_ll128_busbw_factor" + ("_one_gpu_per_node" if ppn < 2 else ""))
                if a == TREE:
                    bus *= factor("tree_busbw_factor")
                if a == TREE and p == LL:
                    bus = min(bus * factor("tree_ll_busbw_factor"), ll_max_bw)
                if a == TREE and p == LL128:
                    bus *= factor("tree_ll128_busbw_factor_" + ("single_node" if n_nodes == 1 else "multi_node"))
                ratio = n_ranks / nsteps if a == RING else factor(f"{a}_algbw_ratio")
                latency = 0.0 if a == NVLS else float(c[f"nccl-latency-base.base_{a}_{p}_us"])
                intra_lat = hw_lat("nvlink", a, p)
                inter_lat = hw_lat("net", a, p)  # + graphs[a]->latencyInter (0), twice for Simple
                if a == RING:
                    net_overhead = 0.0
                    if n_nodes > 1:
                        net_overhead = float(c[f"nccl-net-overhead.net_overhead_{cpu_vendor}_us"])
                        net_overhead *= 3 if p == SIMPLE else 1
                    intra_lat = max(intra_lat, net_overhead)
                    latency += (nsteps - n_inter_steps) * intra_lat + n_inter_steps * inter_lat
                elif a == TREE:
                    latency += 2 * ((n_ranks // n_nodes - 1) * intra_lat + int(math.log2(n_nodes)) * inter_lat)
                else:  # NVLS: assigned, not added
                    latency = intra_lat + (inter_lat if n_nodes > 1 else 0.0)
                out[(coll, a, p)] = {"latency_us": latency, "bus": bus, "algbw": bus * ratio}
    return out


def time_s(cell: dict, message_bytes: float) -> float:
    """ncclTopoGetAlgoTime: latency + bytes / algbw."""
    return cell["latency_us"] * 1e-6 + message_bytes / cell["algbw"]


def hand_overs(cells: dict, collective: str, lo: float = 1.0, hi: float = 2.0**36) -> list[float]:
    """Where the fastest choice changes between lo and hi bytes: every size at which two choices' times are equal
    (L1 + S/W1 = L2 + S/W2) and the argmin over all choices just below differs from just above."""
    mine = [v for (coll, _, _), v in cells.items() if coll == collective]

    def fastest(size: float) -> int:
        return min(range(len(mine)), key=lambda k: time_s(mine[k], size))

    out = []
    for i, x in enumerate(mine):
        for j in range(i + 1, len(mine)):
            slope = 1 / x["algbw"] - 1 / mine[j]["algbw"]
            if slope == 0:
                continue
            s = (mine[j]["latency_us"] - x["latency_us"]) * 1e-6 / slope
            if lo < s < hi and {fastest(s * (1 - 1e-9)), fastest(s * (1 + 1e-9))} == {i, j}:
                out.append(s)
    return sorted(out)


def ring_seconds_by_hand(
    collective: str, message_bytes: float, n_ranks: int, bus: float, chip: str, n_nodes: int = 1
) -> float:
    """A ring collective as NCCL 2.30.7's tuner prices it (tuning.cc at 73cf1122, lines 286-412 as copied by
    machine), every constant read from that text: for each protocol, baseLatencies + (nsteps - nInterSteps) x
    max(hwLatencies over NVLink, the network post overhead: Intel's, 3x for Simple) + nInterSteps x the network's
    hwLatency, plus the bytes over busBw x nRanks / nsteps, where busBw is the ring's Simple bandwidth `bus` refined
    per protocol (LL: half of it, at most llMaxBws[index1][nodes], index1 the chip on one node and the hosts' CPU
    vendor on several, lines 263-272: Intel hosts; LL128: 0.92 of it); the fastest protocol wins. With one rank per
    node the tree's network latency (lines 386-388). Assumptions the planner makes too: the per-channel LL128 cap does
    not bind, and Simple's flush adds the network latency a second time (tuning.cc adds the graph's latencyInter
    again). `bus` in bytes/s, `chip` a row of the per-chip tables ("hopper", "blackwell")."""
    text = entries("source_excerpts")["nccl-tuning-v2-30"]["text"]
    c: dict[str, Any] = readings_v2_30(text)
    nsteps = 2 * (n_ranks - 1) if collective == ALL_REDUCE else n_ranks - 1
    n_inter = 0 if n_nodes == 1 else (2 * (n_nodes - 1) if collective == ALL_REDUCE else n_nodes - 1)
    overhead = said(text, r"VENDOR_INTEL\) return ([0-9.]+);") if n_nodes > 1 else 0.0
    # llMaxBws[index1][index2]: the chip's row on one node, on several the hosts' (row 1 AMD, row 0 otherwise: Intel)
    if not re.search(r"index1 = nNodes == 1 \? compCapIndex :\s*\(comm->cpuVendor == NCCL_TOPO_CPU_VENDOR_AMD", text):
        raise ValueError("tuning.cc no longer picks the LL cap's row by chip on one node and by CPU vendor on several")
    row = chip if n_nodes == 1 else CHIPS[0]
    cap = c["nccl-factors-v2-30.ll_max_gbytes_per_s_" + row][min(n_nodes, 3) - 1] * 1e9
    refined = {
        LL: min(cap, bus * c["nccl-factors-v2-30.ring_ll_busbw_factor"]),
        LL128: bus * c["nccl-factors-v2-30.ring_ll128_busbw_factor"],
        SIMPLE: bus,
    }
    times = []
    for p, bus_bw in refined.items():
        intra = max(c[f"nccl-v2-30-latency-nvlink.ring_{p}_us"], overhead * (3 if p == SIMPLE else 1))
        net = "tree" if n_ranks == n_nodes else "ring"  # ppn == 1: "latencies are fully exposed"
        inter = c[f"nccl-v2-30-latency-net.{net}_{p}_us"] * (2 if p == SIMPLE else 1)
        latency_us = c[f"nccl-v2-30-latency-base.base_ring_{p}_us"] + (nsteps - n_inter) * intra + n_inter * inter
        times.append(latency_us * 1e-6 + message_bytes / (bus_bw * n_ranks / nsteps))
    return min(times)
