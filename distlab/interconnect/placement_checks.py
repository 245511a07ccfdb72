"""Chapter 9's placement numbers worked by hand: the ring's alpha-beta cost typed out here for each case the page
shows, with the links' rates from a second route (the Hopper whitepaper's 18 links x 25 GB/s, the QM9700 manual's
port rate, the PCIe spec's transfers x lanes x 128b/130b) and the shapes from Llama 2's released configs, never
from distlab.hardware.collectives, distlab.interconnect.topology or the experiment's own conversions.

Each function compares what the placement experiment put in its Result with these references, as claims.
"""

from __future__ import annotations

import math

from distlab.core.facts import entries, value
from distlab.core.results import Result, worst_relative_gap
from distlab.sharding.zero_checks import LLAMA2_70B, ndr_bytes_per_s, nvlink_bytes_per_s

BF16 = 2  # bytes per bf16 value
H100_NODE = 8  # GPUs (and NDR NICs) of a DGX H100


def alpha_s(transport: str) -> float:
    """NCCL's per-step ring latency in its LL protocol for a transport (nvlink, pci, net), seconds."""
    return value(f"interconnect.nccl-latency-{transport}.ring_ll_us") * 1e-6


def pcie5_bytes_per_s() -> float:
    """PCIe 5 x16 per direction: 32 GT/s x 16 lanes, 128b/130b encoding, bits to bytes (the PCIe spec)."""
    return 32e9 * 16 * 128 / 130 / 8


def ring_allreduce_s(p: int, size: float, alpha: float, bw: float) -> float:
    """Ring all-reduce: reduce-scatter then all-gather, p - 1 steps each, each step S/p bytes per rank."""
    return 2 * (p - 1) * alpha + 2 * (p - 1) * (size / p) / bw


def ring_half_s(p: int, size: float, alpha: float, bw: float) -> float:
    """One half of the ring (reduce-scatter or all-gather): p - 1 steps of S/p bytes."""
    return (p - 1) * alpha + (p - 1) * (size / p) / bw


def per_direction_by_hand(row: dict) -> float:
    """One link's bytes/s each way by a second route where its entry has one: links x per-link rate each way
    (NVLink, the whitepapers), links x lanes x Gb/s per lane (Infinity Fabric, Wheeler), transfers x lanes x
    128b/130b (PCIe, the spec); network ports are quoted per direction in bits; otherwise the datasheet's total / 2."""
    if "gbytes_per_s_per_link_per_direction" in row:
        return row["links"] * row["gbytes_per_s_per_link_per_direction"] * 1e9
    if "gbits_per_s_per_lane" in row:
        return row["links"] * row["lanes_per_link"] * row["gbits_per_s_per_lane"] * 1e9 / 8
    if "gtransfers_per_s_per_lane" in row:
        return row["gtransfers_per_s_per_lane"] * 1e9 * row["lanes"] * (128 / 130) / 8
    if "gbits_per_s_per_direction" in row:
        return row["gbits_per_s_per_direction"] * 1e9 / 8
    return row["bidirectional_gbytes_per_s"] * 1e9 / 2


def crossover_by_hand(p: int, alpha: float, bw: float) -> float:
    """Tree all-reduce (2·log2 p steps, factor 2) against the ring (2(p-1) steps, factor 2(p-1)/p): equal when
    (2(p-1) - 2 log2 p)·α = (2 - 2(p-1)/p)·S/B."""
    return (2 * (p - 1) - 2 * math.log2(p)) * alpha * bw / (2 - 2 * (p - 1) / p)


def links_table(r: Result) -> None:
    """n½ of an 8-rank ring all-reduce, row by row: 14α = (14/8)·n½/B, so n½ = 8·α·B; and the ratio the page prints."""
    header = r.tables["links"].columns[4]
    assert header == "n½ of an 8-rank ring all-reduce", header
    pairs = [(row[4].value, 8 * row[3].value * row[1].value) for row in r.tables["links"].rows]
    pairs += [(row[2].value, 2 * row[1].value) for row in r.tables["links"].rows]
    r.claim(
        "links table: n½ = 8αB and both directions = 2B, row by row (largest gap)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-12,
    )
    rows = entries("interconnect")
    second = [(row[1].value, per_direction_by_hand(rows[row[0]])) for row in r.tables["links"].rows]
    second.append((r.quantities["pcie5_per_direction"].value, pcie5_bytes_per_s()))
    r.claim(
        "links table: per direction = each entry's second route (largest gap)",
        worst_relative_gap(second),
        0.0,
        abs_tol=1e-12,
    )
    ndr = ndr_bytes_per_s()
    r.claim(
        "tree/ring crossover, 64 ranks of NDR = (126 - 12)·α·B / (2 - 126/64) by hand",
        r.quantities["ib_tree_crossover_64"].value,
        crossover_by_hand(64, alpha_s("net"), ndr),
        rel_tol=1e-12,
    )
    r.claim(
        "NVLink 4 / NDR = Hopper whitepaper's 18 x 25 GB/s over QM9700's 400 Gb/s / 8",
        r.quantities["nvlink_over_ndr"].value,
        nvlink_bytes_per_s() / ndr_bytes_per_s(),
        rel_tol=1e-12,
    )


def figure_curves() -> dict[str, tuple[float, float]]:
    """(α, B) of each curve of the time-vs-size figure, by its label: a flat ring over nodes runs at
    min(B_NVLink, NICs of the group in a node x B_NDR) with the network's latency."""
    nvl, ndr = nvlink_bytes_per_s(), ndr_bytes_per_s()
    return {
        "8 GPUs, NVLink 4 (one node)": (alpha_s("nvlink"), nvl),
        "8 GPUs on 2 nodes, NDR (4 NICs/node)": (alpha_s("net"), min(nvl, 4 * ndr)),
        "8 GPUs on 8 nodes, NDR (1 NIC each)": (alpha_s("net"), min(nvl, 1 * ndr)),
        "8 GPUs, PCIe 5 x16": (alpha_s("pci"), pcie5_bytes_per_s()),
    }


def figure_claim(r: Result, ax) -> None:
    """The figure's drawn curves read back against the 8-rank ring typed above, at the sizes it plots."""
    curves = figure_curves()
    pairs, drawn = [], set()
    for line in ax.get_lines():
        a, bw = curves[line.get_label()]
        drawn.add(line.get_label())
        pairs += [(y, ring_allreduce_s(8, x, a, bw)) for x, y in zip(line.get_xdata(), line.get_ydata())]
    r.claim(
        "time-vs-size figure: drawn points = 8-rank ring by hand (largest gap)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-12,
    )
    r.claim("time-vs-size figure: curves drawn = the four links it names", len(drawn & set(curves)), len(curves))


def gb_claim(r: Result) -> None:
    """The worked problem's 1 GB all-reduce on 8 GPUs, one NVLink node and 8 nodes of one NDR port."""
    curves, q = figure_curves(), r.quantities
    gb = [
        (q["gb_allreduce_nvlink_s"].value, ring_allreduce_s(8, 1e9, *curves["8 GPUs, NVLink 4 (one node)"])),
        (q["gb_allreduce_ib_s"].value, ring_allreduce_s(8, 1e9, *curves["8 GPUs on 8 nodes, NDR (1 NIC each)"])),
    ]
    r.claim(
        "1 GB all-reduce on 8 GPUs, NVLink and 8 nodes of NDR, by hand (largest gap)",
        worst_relative_gap(gb),
        0.0,
        abs_tol=1e-12,
    )


def tp_claim(r: Result) -> None:
    """TP=8 of Llama 2 70B (config.json's shape, Table 1's 4k context), micro-batch 1: 4L all-reduces of s·h bf16
    values per micro-batch, on one node, 2 nodes of 4 and 8 nodes of 1, against 6Ψ·s / (8 · peak · MFU)."""
    from distlab.models.published import llama2_context
    from distlab.models.shapes import published_params

    q = {k: v.value for k, v in r.quantities.items()}
    p70, seq = published_params("70B"), llama2_context()
    assert p70 is not None
    message = seq * LLAMA2_70B["hidden"] * BF16
    count = 4 * LLAMA2_70B["layers"]  # attention and MLP outputs in forward, their conjugates in backward
    peak = value("gpus.H100-SXM.bf16_dense_tflops") * 1e12
    compute = 6 * p70 * seq / (8 * peak * q["assumed_mfu"])
    nvl, ndr = nvlink_bytes_per_s(), ndr_bytes_per_s()
    cases = [  # (row, key, α, per-rank B)
        (0, "node", alpha_s("nvlink"), nvl),
        (1, "two_nodes", alpha_s("net"), min(nvl, 4 * ndr)),
        (2, "eight_nodes", alpha_s("net"), min(nvl, 1 * ndr)),
    ]
    pairs = [
        (q["tp_message_bytes"], message),
        (q["tp_allreduces"], count),
        (q["tp_compute_s"], compute),
        (q["tp_compute_peak_s"], compute * q["assumed_mfu"]),
        (q["tp_layers"], LLAMA2_70B["layers"]),
        (q["tp_hidden"], LLAMA2_70B["hidden"]),
        (q["tp_seq"], seq),
        (q["tp_model_params"], p70),
    ]
    comm = {}
    for i, key, a, bw in cases:
        one = ring_allreduce_s(8, message, a, bw)
        comm[key] = count * one
        row = r.tables["tp"].rows[i]
        pairs += [(row[1].value, bw), (row[2].value, one), (row[3].value, count * one), (row[4].value, compute)]
        pairs += [(row[5], count * one / compute), (q[f"tp_{key}_per_allreduce_s"], one)]
        pairs += [(q[f"tp_{key}_comm_s"], count * one), (q[f"tp_{key}_comm_over_compute"], count * one / compute)]
    pairs.append((q["tp_bad_placement_extra_s"], comm["eight_nodes"] - comm["node"]))
    r.claim(
        "TP=8 table and text: 4L ring all-reduces of s·h·2 B vs 6Ψs/(8·peak·MFU), by hand (largest gap)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-12,
    )


def dp_claim(r: Result) -> None:
    """7B's bf16 gradients (the released checkpoint's count) and a 1 MB bucket over 4 DGX nodes of 8: a flat
    32-rank ring through 8 or 1 NICs per node, and the two-level algorithm's three phases (ring reduce-scatter
    over NVLink, 8 parallel 4-rank all-reduces of S/8 over NDR, ring all-gather), summed and the largest."""
    from distlab.models.shapes import published_params

    q = {k: v.value for k, v in r.quantities.items()}
    p7 = published_params("7B")
    assert p7 is not None
    nvl, ndr, a_nvl, a_net = nvlink_bytes_per_s(), ndr_bytes_per_s(), alpha_s("nvlink"), alpha_s("net")
    g, n = H100_NODE, 4
    pairs = [(q["dp_grad_bytes"], BF16 * p7)]
    for row, size, key in zip(r.tables["dp"].rows, (BF16 * p7, 1e6), ("dp", "dp_small"), strict=True):
        phases = [
            ring_half_s(g, size, a_nvl, nvl),
            ring_allreduce_s(n, size / g, a_net, ndr),
            ring_half_s(g, size, a_nvl, nvl),
        ]
        ref = [
            size,
            ring_allreduce_s(g * n, size, a_net, min(nvl, g * ndr)),
            ring_allreduce_s(g * n, size, a_net, min(nvl, 1 * ndr)),
            sum(phases),
            max(phases),
        ]
        pairs += list(zip([c.value for c in row[1:]], ref, strict=True))
        names = ("flat_eight_nics", "flat_one_nic", "hier", "hier_pipelined")
        pairs += [(q[f"{key}_{k}_s"], v) for k, v in zip(names, ref[1:], strict=True)]
    r.claim(
        "DP table over 4 x 8 H100: flat rings and the two-level phases by hand (largest gap)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-12,
    )
    # DistributedDataParallel's documented default, bucket_cap_mb=25, in MiB (PyTorch's docs)
    r.claim("DDP's default bucket = bucket_cap_mb=25 MiB (PyTorch docs)", q["ddp_bucket_bytes"], 25 * 1024 * 1024)


def nvl72_claim(r: Result) -> None:
    """GB200 NVL72 (chapter 9's rack example) by hand: trays, the TP table (Llama 2 70B's 4L all-reduces of s·h·2 B
    on NVLink 4 and 5 inside the domain, and TP 16 over two HGX nodes of 8 NDR NICs), and the DeepSeek-V3 layout on
    4 racks (config.json's 61 layers, 7168 width, 256 routed experts) with its pipeline hop over one NDR port."""
    import math

    from distlab.models.published import llama2_context

    q = {k: v.value for k, v in r.quantities.items()}
    rack = "interconnect.NVSwitch-GB200-NVL72"
    gpus = value(f"{rack}.superchips") * value(f"{rack}.gpus_per_superchip")
    tray = value(f"{rack}.gpus_per_tray")
    nvl4, ndr = nvlink_bytes_per_s(), ndr_bytes_per_s()
    nvl5 = (
        value("interconnect.NVLink5-B200.links")
        * value("interconnect.NVLink5-B200.gbytes_per_s_per_link_per_direction")
        * 1e9
    )
    seq = llama2_context()
    message = seq * LLAMA2_70B["hidden"] * BF16
    count = 4 * LLAMA2_70B["layers"]
    cases = [  # (ranks, α, per-rank B): one HGX node, two NVL72 trays, two HGX nodes of 8 NICs, four NVL72 trays
        (8, alpha_s("nvlink"), nvl4),
        (8, alpha_s("nvlink"), nvl5),
        (16, alpha_s("net"), min(nvl4, 8 * ndr)),
        (16, alpha_s("nvlink"), nvl5),
    ]
    pairs = [(q["trays"], gpus / tray)]
    ms = []
    for row, (p, a, bw) in zip(r.tables["tp"].rows, cases, strict=True):
        ms.append(count * ring_allreduce_s(p, message, a, bw) * 1e3)
        pairs += [(row[1], bw / 1e9), (row[2], ms[-1])]
    pairs += [(q["tp16_hgx_ms"], ms[2]), (q["tp16_nvl72_ms"], ms[3]), (q["tp16_ratio"], ms[2] / ms[3])]
    import re

    cap = re.search(r"(\d+) all-reduces of ([\d.]+) MB \(micro-batch 1, s = (\d+)\)", r.tables["tp"].caption)
    assert cap is not None
    pairs += [(float(cap.group(1)), count), (float(cap.group(2)), round(message / 1e6, 1)), (float(cap.group(3)), seq)]
    ds = "moe_models.DeepSeek-V3"
    ep, racks = q["layout_ep"], q["layout_pp"]
    hop = 4096 * value(f"{ds}.hidden") * BF16
    pairs += [
        (q["layout_spare"], gpus - ep),
        (q["layout_spare_trays"], (gpus - ep) / tray),
        (q["layout_experts_per_gpu"], value(f"{ds}.experts") / ep),
        (q["layout_layers_max"], math.ceil(value(f"{ds}.layers") / racks)),
        (q["layout_layers"], value(f"{ds}.layers")),
        (q["pp_hop_bytes"], hop),
        (q["pp_hop_ms"], hop / ndr * 1e3),
    ]
    r.claim(
        "NVL72 trays, TP table, caption and DeepSeek-V3 layout by hand (largest gap)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-12,
    )


def rail_claim(r: Result) -> None:
    """The rail-optimised vs plain fat-tree comparison of one SU by hand: a QM9700 leaf gives half its ports to
    nodes, so a plain tree puts (64/2)/8 = 4 DGX nodes on a leaf; a ring over the SU's 32 nodes leaves a leaf once
    per leaf (1/4 of its hops); of a node's all-to-all bytes to the other 31 nodes, those to the 28 beyond its leaf
    cross the spine; without NVLink forwarding, 7 of 8 destination GPUs sit on another rail."""
    import re

    q = {k: v.value for k, v in r.quantities.items()}
    su, g = value("cluster_fabric.dgx-superpod-h100.nodes_per_su"), value("interconnect.DGX-H100.gpus_per_node")
    per_leaf = value("cluster_fabric.qm9700.ports") / 2 / g
    plain_ring = (su / per_leaf) / su
    plain_a2a = (su - per_leaf) / (su - 1)
    cross = (g - 1) / g
    rows = r.tables["compare"].rows
    pct = lambda cell: float(cell.split()[0])
    printed = [
        (pct(rows[2][1]), 0.0),
        (pct(rows[2][2]), round(100 * plain_ring, 1)),
        (pct(rows[3][1]), 0.0),
        (pct(rows[3][2]), round(100 * plain_a2a, 1)),
        (pct(rows[4][1]), round(100 * cross, 1)),
        (pct(rows[4][2]), round(100 * plain_a2a, 1)),
        (rows[0][1].value, ndr_bytes_per_s()),
        (rows[0][2].value, ndr_bytes_per_s()),
    ]
    cap = re.search(r"One SU of (\d+) DGX nodes x (\d+) GPUs", r.tables["compare"].caption)
    assert cap is not None
    printed += [(float(cap.group(1)), su), (float(cap.group(2)), g)]
    printed += [
        (q["nodes_per_leaf_plain"], per_leaf),
        (q["ring_spine_share_rail"], 0.0),
        (q["ring_spine_share_plain"], plain_ring),
        (q["alltoall_cross_rail"], cross),
        (q["alltoall_plain_spine"], plain_a2a),
        (q["nodes_per_su"], su),
    ]
    r.claim(
        "rail vs plain fat tree: compare table, caption and shares by hand (largest gap)",
        worst_relative_gap(printed),
        0.0,
        abs_tol=1e-12,
    )


def nccl_latency_claim(r: Result) -> None:
    """The four all-reduce latencies the page quotes from NCCL's tuner, composed by hand as tuning.cc does
    (ncclTopoTuneModel): ring = base + (2(n-1) - 2·nodes) x max(intra hwLat, net overhead) + 2·nodes x net hwLat
    on several nodes, base + 2(n-1) x intra hwLat in one; tree = base + 2((n/nodes - 1) x intra + log2(nodes) x net);
    NVLS = its intra hwLat alone. 8 GPUs in a node; 64 over 8 nodes with an Intel host's 1 µs post overhead."""
    lat = lambda t, k: value(f"interconnect.nccl-latency-{t}.{k}_us") * 1e-6
    base = lambda k: value(f"interconnect.nccl-latency-base.base_{k}_us") * 1e-6
    overhead = value("interconnect.nccl-net-overhead.net_overhead_intel_us") * 1e-6
    inter_steps = 2 * 8
    ref = {
        "node_ring_ll_latency_s": base("ring_ll") + 2 * 7 * lat("nvlink", "ring_ll"),
        "node_nvls_latency_s": lat("nvlink", "nvls_simple"),
        "cluster_ring_ll_latency_s": base("ring_ll")
        + (2 * 63 - inter_steps) * max(lat("nvlink", "ring_ll"), overhead)
        + inter_steps * lat("net", "ring_ll"),
        "cluster_tree_ll_latency_s": base("tree_ll")
        + 2 * ((8 - 1) * lat("nvlink", "tree_ll") + math.log2(8) * lat("net", "tree_ll")),
    }
    pairs = [(r.quantities[k].value, v) for k, v in ref.items()]
    r.claim(
        "NCCL's all-reduce latencies, node and 64 GPUs, composed by hand (largest gap)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-12,
    )


# Each link field against the number its source's own sentence prints (facts.quoted), and the relations the
# sources state: a field typed wrong disagrees with its quote, a quote transcribed wrong with its field.
LINK_QUOTES = {
    "InfiniBand-HDR.gbits_per_s_per_direction": r"HDR ([0-9]+) Gb/s",
    "InfiniBand-NDR.gbits_per_s_per_direction": r"NDR ([0-9]+) Gb/s",
    "InfiniBand-XDR.gbits_per_s_per_direction": r"XDR ([0-9]+) Gb/s",
    "Ethernet-100G.gbits_per_s_per_direction": r"802\.3ba-2010, 40 Gb/s and ([0-9]+) Gb/s",
    "Ethernet-400G.gbits_per_s_per_direction": r"802\.3bs-2017, 200 Gb/s and ([0-9]+) Gb/s",
    "Ethernet-800G.gbits_per_s_per_direction": r"802\.3df-2024, ([0-9]+) Gb/s",
    "NVLink1-P100.bidirectional_gbytes_per_s": r"([0-9]+) GB/s of total bidirectional",
    "NVLink1-P100.links": r"(four|[0-9]+) NVLink links",
    "NVLink2-V100.bidirectional_gbytes_per_s": r"NVLink ([0-9]+) GB/s",
    "PCIe4-x16.gtransfers_per_s_per_lane": r"([0-9]+) GT/s and [0-9]+ GT/s per lane",
    "PCIe5-x16.gtransfers_per_s_per_lane": r"[0-9]+ GT/s and ([0-9]+) GT/s per lane",
    "NVSwitch-HGX-H100.gpus_per_domain": r"HGX H100 ([0-9]+)-GPU",
    "DGX-H100.gpus_per_node": r"([0-9]+) H100 GPUs",
    "DGX-H100.gbits_per_s_per_direction": r"ConnectX-7 ([0-9]+) Gb/s",
    "NVSwitch-GB200-NVL72.gpus_per_domain": r"([0-9]+) Blackwell GPUs in one NVLink domain",
    "NVSwitch-GB200-NVL72.superchips": r"\(([0-9]+) GB200 superchips",
    "NVSwitch-GB200-NVL72.aggregate_nvlink_tbytes_per_s": r"NVLink bandwidth ([0-9]+) TB/s",
    "NVSwitch-GB200-NVL72.gpus_per_superchip": r"1 Grace \+ ([0-9]+) Blackwell",
    "NVSwitch-GB200-NVL72.gpus_per_tray": r"accelerators_per_node ([0-9]+)",
    "NVSwitch-GB200-NVL72.nvlink_switch_trays": r"have ([0-9]+) NVLink switch trays per rack",
    "xGMI-MI300X.links": r"([0-9]+) Infinity Fabric links",
    "xGMI-MI300X.bidirectional_gbytes_per_s_per_link": r"([0-9]+) GB/s peak each",
    "xGMI-MI300X.lanes_per_link": r"each with ([0-9]+) lanes",
    "xGMI-MI300X.gbits_per_s_per_lane": r"up to ([0-9]+) Gbps per lane",
}


def source_quotes_claim(r: Result) -> None:
    """The links' and the DGX's typed fields against their sources' sentences, and the relations the sources give:
    HGX H100's 18 links x 25 GB/s each way = its 900 GB/s both ways, NVL72's 36 superchips x 2 GPUs = its 72, MI300X's
    7 links = its platform's 8 GPUs - 1 and 16 lanes x 32 Gb/s both ways = 128 GB/s per link, PCIe's transfers x
    lanes both ways = its raw GB/s, a PCIe entry's lanes = its name's x16, the DGX H100's eight single-port NICs = its
    eight GPUs' NICs."""
    from distlab.core.facts import quoted

    def said(path: str, pattern: str) -> float:
        return quoted(f"interconnect.{path}", pattern)

    pairs = [(value(f"interconnect.{path}"), said(path, pattern)) for path, pattern in LINK_QUOTES.items()]
    links = said("NVSwitch-HGX-H100.bidirectional_gbytes_per_s", r"\(([0-9]+) links per GPU")
    each = said("NVSwitch-HGX-H100.bidirectional_gbytes_per_s", r"([0-9]+) GB/s each way per link")
    pairs.append((value("interconnect.NVSwitch-HGX-H100.bidirectional_gbytes_per_s"), links * each * 2))
    for name in ("PCIe4-x16", "PCIe5-x16"):
        row = entries("interconnect")[name]
        pairs.append((row["bidirectional_gbytes_per_s"], row["gtransfers_per_s_per_lane"] * row["lanes"] * 2 / 8))
        pairs.append((row["lanes"], float(name.rsplit("x", 1)[1])))
    pairs.append((value("interconnect.DGX-H100.compute_nics"), said("DGX-H100.compute_nics", r"(eight) single-port")))
    # NVL72: its superchips' GPUs fill the domain; MI300X: a full mesh (a link to each other GPU of the platform),
    # each link 16 lanes both ways, as a second source (Wheeler) prints both the links and the per-link rate
    nvl72, mi300x = entries("interconnect")["NVSwitch-GB200-NVL72"], entries("interconnect")["xGMI-MI300X"]
    pairs.append((nvl72["gpus_per_domain"], nvl72["superchips"] * nvl72["gpus_per_superchip"]))
    pairs.append((mi300x["links"], mi300x["platform_gpus"] - 1))
    pairs.append((mi300x["links"], said("xGMI-MI300X.lanes_per_link", r"up to (seven) Infinity Fabric links")))
    per_link = mi300x["lanes_per_link"] * mi300x["gbits_per_s_per_lane"] * 2 / 8
    pairs.append((mi300x["bidirectional_gbytes_per_s_per_link"], per_link))
    pairs.append((per_link, said("xGMI-MI300X.lanes_per_link", r"yielding ([0-9]+) GB/s of bidirectional")))
    # RoCE runs InfiniBand's transport over the Ethernet port it names: its rate is 400 Gb/s Ethernet's
    ethernet = "Ethernet-400G.gbits_per_s_per_direction"
    pairs.append((value("interconnect.RoCE-400GbE.gbits_per_s_per_direction"), said(ethernet, LINK_QUOTES[ethernet])))
    r.claim(
        "interconnect.toml: each link and DGX field = the number its source prints, and the sources' relations "
        "(worst relative gap)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-12,
    )


def superpod_rows_claim(r: Result) -> None:
    """The SuperPOD component rows against the relations their sources print: 32 nodes per SU (the B200 reference
    architecture's '4 SU units with 128 DGX nodes'; the H100 one's 'SUs of 32 DGX H100 systems'), a node-leaf cable
    per GPU, and the H100 row's nodes per SU against its own quote."""
    from distlab.core.facts import quoted

    per_su = quoted("cluster_fabric.dgx-superpod-b200-4su.nodes", r"focused on ([0-9]+) SU units")
    per_su = quoted("cluster_fabric.dgx-superpod-b200-4su.nodes", r"SU units with ([0-9]+) DGX nodes") / per_su
    pairs = []
    for key, row in entries("cluster_fabric").items():
        if key.startswith("dgx-superpod-b200-") and isinstance(row, dict) and "su" in row:
            pairs += [(row["nodes"], row["su"] * per_su), (row["gpus"], row["node_leaf_cables"])]
    pairs.append(
        (
            value("cluster_fabric.dgx-superpod-h100.nodes_per_su"),
            quoted("cluster_fabric.dgx-superpod-h100.nodes_per_su", r"SUs of ([0-9]+) DGX H100 systems each"),
        )
    )
    r.claim(
        "SuperPOD rows: nodes = SUs x 32 (the reference architecture's 128 nodes in 4 SUs), a node-leaf cable per "
        "GPU, the H100 SU's 32 nodes as quoted (worst relative gap)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-12,
    )


def gpu_nic_paths_claim(r: Result, sizes: tuple[float, int, int], smp_entries: dict[str, str]) -> None:
    """The GPU-NIC affinity appendix by hand: a path's bandwidth is its slowest hop (PCIe 5 x16 from its transfers,
    lanes and 128b/130b encoding; an NDR port from the QM9700 manual; NCCL's SMP figure where it crosses sockets),
    the SMP table's percentages, and a flat ring all-reduce of S bytes on p GPUs, g per node with a NIC each:
    2(p - 1) alpha + 2(p - 1)/p x S / min(NVLink, g x path), alpha NCCL's LL step on the network. `sizes`: the page's
    (S, p, GPUs sharing one SMP link); `smp_entries`: the SMP table's CPUs and their interconnect.toml entries."""
    size, ranks, sharing = sizes
    row = entries("interconnect")["PCIe5-x16"]
    pcie = row["gtransfers_per_s_per_lane"] * 1e9 * row["lanes"] * row["payload_bits"] / row["line_bits"] / 8
    ndr, nvlink = ndr_bytes_per_s(), nvlink_bytes_per_s()  # second sources: the switch manual, links x per-link rate
    alpha = value("interconnect.nccl-latency-net.ring_ll_us") * 1e-6
    smp = value("interconnect.nccl-smp-intel-sapphire-rapids.inter_socket_gbytes_per_s") * 1e9
    near, far = min(pcie, ndr), min(pcie, ndr, smp)
    per_node = value("interconnect.DGX-H100.gpus_per_node")

    def ring(path: float) -> float:
        return 2 * (ranks - 1) * alpha + 2 * (ranks - 1) / ranks * size / min(nvlink, per_node * path)

    q = r.quantities
    pairs = [
        (q["near_bytes_per_s"].value, near),
        (q["far_bytes_per_s"].value, far),
        (q["far_over_near"].value, far / near),
        (q["allreduce_near_s"].value, ring(near)),
        (q["allreduce_far_s"].value, ring(far)),
        (q["allreduce_shared_s"].value, ring(far / sharing)),
    ]
    for cells in r.tables["smp"].rows:
        link = value(f"interconnect.{smp_entries[cells[0]]}.inter_socket_gbytes_per_s") * 1e9
        pairs += [(cells[1].value, link), (float(cells[2].rstrip(" %")), round(100 * min(link, ndr) / ndr))]
    paths = {cells[0]: cells[3].value for cells in r.tables["paths"].rows}
    pairs += [(paths[p], near) for p in ("PIX", "PXB", "PHB")] + [(paths["SYS"], far)]
    r.claim(
        "GPU-NIC paths, the SMP table and the 1 GB all-reduces by hand (worst relative gap)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-9,
        formula="path = min(PCIe 5 x16, NDR, SMP); t = 2(p-1) alpha + 2(p-1)/p S / min(NVLink, 8 path)",
    )
