"""nccl-algorithms: NCCL's own cost model (distlab.interconnect.nccl_model) drawn for 8 GPUs in a node and 64 across
8 nodes, the sizes at which it switches algorithm or protocol, and the model against a published nccl-tests sweep.

Checks, each against something the model does not compute itself:
- every cell of the tuning table, the quantities the page quotes and the crossovers (walked analytically along the
  lower envelope) against ncclTopoTuneModel's loop transcribed from tuning.cc with the C text's own constants
  (nccl_tuning_checks);
- the protocols' bandwidth factors against the bytes a line carries (LL and LL128 line layouts in device.h);
- every latency, bandwidth factor and cap typed in interconnect.toml against tuning.cc itself, copied by machine at
  both commits (nccl_source_checks);
- the predicted envelope against the published 8 x H100 all_reduce_perf sweep (NVIDIA's DGX benchmarking recipe),
  with a tolerance per regime, and the published busbw at 8 GiB against the NVLink line rate (only NVLS exceeds it).
"""

from __future__ import annotations

import math
import re

import numpy as np

from distlab.core.experiments import experiment
from distlab.core.facts import entries, value
from distlab.core.results import Quantity, Result, worst_relative_gap
from distlab.hardware.links import per_direction_bytes_per_s
from distlab.interconnect import nccl_source_checks, nccl_tests_checks, nccl_tuning_checks, placement_checks
from distlab.interconnect.nccl_model import (
    COLLECTIVES,
    algorithm_bandwidth,
    best,
    bus_bandwidth,
    choices,
    ib_cluster,
    label,
    latency_us,
    nvlink_node,
    time_seconds,
    winners,
)

PUBLISHED = "dgxc-h100-8gpu-all-reduce"  # nccl_tests.toml: 8 x H100 SXM, one node, 8 B to 16 GiB
# Inputs the page states: the sweep's sizes the published table shows, and where its two ends are cut.
SHOWN_SIZES = (8, 1024, 65536, 2**20, 2**22, 2**24, 2**26, 2**28, 2**30, 2**32, 2**34)
SMALL_TOP = 1024  # the latency end: 8 B to 1 KiB
LARGE_FROM = 2**30  # the bandwidth end: 1 GiB and up
FIGURE_SIZES = np.logspace(0, 10.5, 300)  # the figure's x grid: 1 B to 32 GB
Y_RANGE = (5e-6, 1)  # the figure's y axis, seconds


def topologies():
    return {"node": nvlink_node(8), "cluster": ib_cluster(8)}


def by_source(topos) -> dict:
    """Each topology's tables as ncclTopoTuneModel computes them (nccl_tuning_checks), by the topology's key."""
    return {key: nccl_tuning_checks.tune_model(t.ranks, t.nodes, t.cpu_vendor) for key, t in topos.items()}


@experiment(
    "nccl-algorithms",
    "NCCL's tuning model: ring, tree and NVLS x LL, LL128, Simple for 8 GPUs in a node and 64 across nodes, "
    "crossovers, and the model against a published nccl-tests sweep",
    kind="computed",
)
def nccl_algorithms(device: str) -> Result:
    r = Result("nccl-algorithms", kind="computed")
    topos = topologies()
    hands = by_source(topos)
    _tuning_table(r, topos, hands)
    placement_checks.nccl_latency_claim(r)
    _crossovers(r, topos, hands)
    _protocol_factors(r)
    nccl_source_checks.nccl_source_claim(r)
    _against_published(r, topos["node"])
    nccl_tests_checks.check_columns(r, PUBLISHED, entries("nccl_tests")[PUBLISHED])  # the sweep it is judged by
    _figure(r, topos, hands)
    _label_claim(r, topos)
    return r


def _tuning_table(r: Result, topos, hands: dict) -> None:
    """What NCCL prints under NCCL_DEBUG_SUBSYS=TUNING: latency and algbw per algorithm x protocol."""
    rows = []
    pairs: list[tuple[float, float]] = []
    graphs: list[tuple[float, float]] = []
    odd: list[tuple] = []
    for key, topo in topos.items():
        hand = hands[key]
        listed = set()
        for coll in COLLECTIVES:
            if coll == "reduce-scatter":  # same numbers as all-gather in this model
                continue
            for a, p in choices(coll, topo):
                listed.add((coll, a, p))
                rows.append(
                    [
                        topo.label,
                        coll,
                        label(a, p),
                        Quantity(latency_us(coll, a, p, topo) * 1e-6, "s"),
                        Quantity(algorithm_bandwidth(coll, a, p, topo), "B/s"),
                        Quantity(bus_bandwidth(coll, a, p, topo), "B/s"),
                    ]
                )
        r.add(f"{key}_graph_bytes_per_s", topo.graph_bytes_per_s, "B/s", f"{topo.label}: graph bandwidth")
        graphs.append((topo.graph_bytes_per_s, nccl_tuning_checks.graph_bytes_per_s(topo.nodes)))
        offered = {k for k in hand if k[0] != "reduce-scatter"}  # the table shows reduce-scatter as all-gather
        odd += sorted(listed ^ offered)
        odd += [k for k in offered if k[0] == "all-gather" and hand[("reduce-scatter", *k[1:])] != hand[k]]
    r.claim(
        "graph bandwidths = NCCL's NVLink rate, capped by the NICs: worst gap",
        worst_relative_gap(graphs),
        0.0,
        abs_tol=1e-12,
    )
    r.claim(
        "tuning table: rows tuning.cc's loop does not fill, or where its RS and AG differ",
        len(odd),
        0,
        formula="; ".join("/".join(k) for k in odd) or "none",
    )
    r.table(
        "tuning",
        ["communicator", "collective", "algorithm/protocol", "latency", "algbw", "busBw (NCCL's)"],
        rows,
        caption="NCCL 2.20.3's tuning model rebuilt from its tables (reduce-scatter = all-gather here); "
        "time = latency + bytes / algbw; computed",
    )
    key_of = {topo.label: key for key, topo in topos.items()}
    for where, coll, name, *shown in rows:  # the cells as the page shows them
        a, p = (x.lower() for x in name.split("/"))
        cell = hands[key_of[where]].get((coll, a, p), {"latency_us": math.nan, "bus": math.nan, "algbw": math.nan})
        want = (cell["latency_us"] * 1e-6, cell["algbw"], cell["bus"])
        pairs += [(q.value, w) for q, w in zip(shown, want, strict=True)]
    r.claim(
        f"tuning table: {len(pairs)} cells = tuning.cc's loop: worst gap",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-12,
    )
    node = topos["node"]
    quoted: list[tuple[float, float]] = []
    for key, where, coll, a, p in (
        ("node_ring_ll_latency_s", "node", "all-reduce", "ring", "ll"),
        ("node_nvls_latency_s", "node", "all-reduce", "nvls", "simple"),
        ("cluster_tree_ll_latency_s", "cluster", "all-reduce", "tree", "ll"),
        ("cluster_ring_ll_latency_s", "cluster", "all-reduce", "ring", "ll"),
    ):
        topo = topos[where]
        r.add(key, latency_us(coll, a, p, topo) * 1e-6, "s", f"{topo.label}: {label(a, p)} {coll} latency")
        quoted.append((r.quantities[key].value, hands[where][(coll, a, p)]["latency_us"] * 1e-6))
    r.add(
        "node_nvls_algbw",
        algorithm_bandwidth("all-reduce", "nvls", "simple", node),
        "B/s",
        "8 GPUs: NVLS all-reduce algbw",
    )
    r.add(
        "node_ring_algbw",
        algorithm_bandwidth("all-reduce", "ring", "simple", node),
        "B/s",
        "8 GPUs: ring Simple all-reduce algbw",
    )
    for key, a in (("node_nvls_algbw", "nvls"), ("node_ring_algbw", "ring")):
        quoted.append((r.quantities[key].value, hands["node"][("all-reduce", a, "simple")]["algbw"]))
    r.claim("quoted latencies and algbw = tuning.cc's loop: worst gap", worst_relative_gap(quoted), 0.0, abs_tol=1e-12)
    r.add("cluster_nics", value("interconnect.DGX-H100.compute_nics"), "", "NICs per DGX H100 node")


def _crossovers(r: Result, topos, hands: dict) -> None:
    rows: list = []
    shown_cells: list[tuple[float, float]] = []
    walked: list[tuple[float, float]] = []
    for key, topo in topos.items():
        for coll in ("all-reduce", "all-gather"):
            env = winners(coll, topo)
            hand = nccl_tuning_checks.hand_overs(hands[key], coll)
            analytic = [w["from_bytes"] for w in env[1:]]
            walked += list(zip(analytic, hand, strict=False)) if len(analytic) == len(hand) else [(math.inf, 1.0)]
            for i, w in enumerate(env):
                rows.append(
                    [
                        topo.label,
                        coll,
                        label(w["algorithm"], w["protocol"]),
                        Quantity(w["from_bytes"], "B") if i else "smallest",
                        Quantity(w["to_bytes"], "B") if i < len(env) - 1 else "largest",
                    ]
                )
            # the table's from/to cells as shown: each hand-over of the tables by source, in order, twice
            cells = [q.value for row in rows if row[:2] == [topo.label, coll] for q in row[3:] if hasattr(q, "value")]
            twice = [x for x in hand for _ in (0, 1)]
            shown_cells += list(zip(cells, twice, strict=False)) if len(cells) == len(twice) else [(math.inf, 1.0)]
            for i, s in enumerate(analytic):
                r.add(f"{key}_{coll.replace('-', '_')}_crossover_{i + 1}", s, "B", f"{topo.label}, {coll}: hand-over")
    r.claim(
        "hand-overs walked along the envelope = where tuning.cc's tables change their fastest choice: worst gap",
        worst_relative_gap(walked),
        0.0,
        abs_tol=1e-9,
        formula="L1 + S/W1 = L2 + S/W2, the same hand-overs in the same order",
    )
    r.claim(
        "winners table: from/to cells = those hand-overs: worst gap", worst_relative_gap(shown_cells), 0.0, abs_tol=1e-9
    )
    r.table(
        "winners",
        ["communicator", "collective", "NCCL's model picks", "from", "to"],
        rows,
        caption="Which algorithm/protocol has the smallest predicted time, by message size (computed)",
    )


def _protocol_factors(r: Result) -> None:
    """A protocol's bandwidth factor cannot exceed the share of a line that carries data."""
    ll_line = value("interconnect.nccl-protocol-ll.line_bytes")
    ll = value("interconnect.nccl-protocol-ll.payload_bytes_per_line") / ll_line
    ll128 = value("interconnect.nccl-protocol-ll128.payload_bytes_per_line") / value(
        "interconnect.nccl-protocol-ll128.line_bytes"
    )
    flag_ll = value("interconnect.nccl-protocol-ll.flag_bytes_per_line")
    r.add("ll_payload_fraction", ll, "fraction", "LL: data bytes per 16-byte line")
    r.add("ll128_payload_fraction", ll128, "fraction", "LL128: data bytes per 128-byte line")
    r.claim(
        "LL line = data + flags (device.h)",
        value("interconnect.nccl-protocol-ll.payload_bytes_per_line") + flag_ll,
        value("interconnect.nccl-protocol-ll.line_bytes"),
        unit="B",
    )
    r.claim(
        "LL128 line = data + one 8-byte flag (device.h)",
        value("interconnect.nccl-protocol-ll128.payload_bytes_per_line")
        + value("interconnect.nccl-protocol-ll128.flag_bytes_per_line"),
        value("interconnect.nccl-protocol-ll128.line_bytes"),
        unit="B",
    )
    for name in ("ring_ll_busbw_factor_single_node", "ring_ll_busbw_factor_multinode_or_reduce"):
        r.claim(
            f"NCCL 2.20.3 {name} <= the LL line's data share",
            value(f"interconnect.nccl-factors-v2-20.{name}"),
            ll,
            relation="<=",
            formula="8 data bytes per 16-byte line",
        )
    r.claim(
        "NCCL 2.30.7's ring LL factor = the LL line's data share",
        value("interconnect.nccl-factors-v2-30.ring_ll_busbw_factor"),
        ll,
        formula="busBw x .5 in tuning.cc at v2.30.7",
    )
    r.claim(
        "ring LL128 factor 0.92 ≈ the LL128 line's data share (the code's comment: 120.0/128.0)",
        value("interconnect.nccl-factors-v2-20.ring_ll128_busbw_factor"),
        ll128,
        rel_tol=0.02,
    )
    r.claim(
        "tree LL128 factor on several nodes = the LL128 line's data share",
        value("interconnect.nccl-factors-v2-20.tree_ll128_busbw_factor_multi_node"),
        ll128,
        rel_tol=1e-12,
    )


def _published(name: str = PUBLISHED) -> dict:
    return entries("nccl_tests")[name]


def _against_published(r: Result, topo) -> None:
    row = _published()
    sizes = row["bytes"]
    measured = [min(a, b) * 1e-6 for a, b in zip(row["time_us"], row["inplace_time_us"])]  # best of the two columns
    predicted = [best("all-reduce", s, topo)[2] for s in sizes]
    ratio = [p / m for p, m in zip(predicted, measured)]
    small = [q for s, q in zip(sizes, ratio) if s <= SMALL_TOP]
    large = [q for s, q in zip(sizes, ratio) if s >= LARGE_FROM]
    mid = [(q, s) for s, q in zip(sizes, ratio) if SMALL_TOP < s < LARGE_FROM]
    worst_mid, worst_mid_size = min(mid)
    rows = [
        [
            Quantity(s, "B"),
            Quantity(m, "s"),
            Quantity(p, "s"),
            label(*best("all-reduce", s, topo)[:2]),
            f"{q:.2f}",
        ]
        for s, m, p, q in zip(sizes, measured, predicted, ratio)
        if s in SHOWN_SIZES
    ]
    r.table(
        "published",
        ["size", "published (best of out-of/in-place)", "NCCL's model", "model's pick", "model / published"],
        rows,
        caption=f"8 x H100 SXM all_reduce_perf from NVIDIA's DGX benchmarking recipe (published sample output; "
        f"{len(rows)} of its {len(sizes)} sizes) against the model; the published run does not print the algorithm "
        "it used",
    )
    r.add("small_band_top", SMALL_TOP, "B", "the latency end: sizes up to this")
    r.add("large_band_from", LARGE_FROM, "B", "the bandwidth end: sizes from this")
    r.add("small_ratio_mean", float(np.mean(small)), "", "model / published, 8 B to 1 KiB")
    r.add("large_ratio_mean", float(np.mean(large)), "", "model / published, 1 GiB and up")
    r.add("mid_ratio_worst", worst_mid, "", "model / published, worst between 1 KiB and 1 GiB")
    r.add("mid_ratio_worst_bytes", worst_mid_size, "B", "where the model is furthest off")
    r.add("published_floor_s", min(measured), "s", "published: smallest time of any size")
    r.add("published_peak_busbw", max(row["busbw_gbps"]) * 1e9, "B/s", "published: largest busbw")
    n = row["ranks"]
    by_time = max(s / (t * 1e-6) for s, t in zip(sizes, row["time_us"], strict=True)) * 2 * (n - 1) / n
    r.claim(
        "published: the largest busbw shown = the largest size / time of the sweep x 2(n-1)/n",
        r.quantities["published_peak_busbw"].value,
        by_time,
        rel_tol=0.005,
        unit="B/s",
        formula="the time column printed to 4 significant digits",
    )
    r.add("published_ranks", row["ranks"], "", "ranks of the published sweep")
    r.claim(
        "small messages: the model's latency = the published sweep's (8 B to 1 KiB)",
        float(np.mean(small)),
        1.0,
        rel_tol=0.2,
        formula="LL ring: baseLat + 2(n-1) x hwLat, against all_reduce_perf",
    )
    r.claim(
        "large messages: the model's NVLS time = the published sweep's (1 GiB and up)",
        float(np.mean(large)),
        1.0,
        rel_tol=0.15,
        formula="bytes / (370 GB/s x 5/6), against all_reduce_perf",
    )
    r.claim(
        "every size: the model within a factor of 2 of the published sweep",
        max(max(ratio), 1 / min(ratio)),
        2.0,
        relation="<=",
        formula="max over 32 sizes of max(model/published, published/model)",
    )
    line = per_direction_bytes_per_s(row["link"])
    r.add("nvlink_line_rate", line, "B/s", "NVLink 4 per direction")
    r.claim(
        "published busbw at 8 GiB exceeds the NVLink line rate: only an in-switch reduction (NVLS) can",
        row["busbw_gbps"][sizes.index(2**33)] * 1e9,
        line,
        relation=">=",
        unit="B/s",
        formula="a ring's busbw is at most the per-direction link rate",
    )
    r.claim(
        "the model picks NVLS at 8 GiB",
        float(best("all-reduce", 2**33, topo)[0] == "nvls"),
        1.0,
        formula="1 = NVLS/Simple has the smallest predicted time",
    )


def _figure(r: Result, topos, hands: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = FIGURE_SIZES
    fig, axes = plt.subplots(1, len(topos), figsize=(12, 4.4), sharey=True)
    styles = {"ll": ":", "ll128": "--", "simple": "-"}
    colours = {"ring": "tab:blue", "tree": "tab:green", "nvls": "tab:red"}
    for ax, (key, topo) in zip(axes, topos.items()):
        for a, p in choices("all-reduce", topo):
            t = [time_seconds("all-reduce", a, p, s, topo) for s in sizes]
            ax.loglog(sizes, t, styles[p], color=colours[a], lw=1, alpha=0.8, label=label(a, p))
        env = [best("all-reduce", s, topo)[2] for s in sizes]
        ax.loglog(sizes, env, color="black", lw=2.5, alpha=0.35, label="NCCL's pick (smallest)")
        for w in winners("all-reduce", topo)[1:]:
            ax.axvline(w["from_bytes"], color="gray", lw=0.8, ls="-.")
        if key == "node":
            row = _published()
            ax.loglog(
                row["bytes"],
                [min(a, b) * 1e-6 for a, b in zip(row["time_us"], row["inplace_time_us"])],
                "k.",
                ms=6,
                label="published 8 x H100 all_reduce_perf",
            )
        ax.set_title(topo.label, fontsize=10)
        ax.set_xlabel("all-reduce size (bytes)")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    axes[0].set_ylabel("predicted seconds per call")
    axes[0].set_ylim(Y_RANGE)
    fig.tight_layout()
    r.claim(
        "figure read back: curves, NCCL's pick and hand-overs = tuning.cc's loop, dots = the published columns, "
        "titles = the labels; points off",
        _figure_read_back(axes, topos, hands),
        0,
        formula="each curve's y = latency + x / algbw from nccl_tuning_checks, the pick their minimum",
    )
    r.figure(
        "time_vs_size",
        fig,
        "NCCL 2.20.3's predicted all-reduce time per algorithm/protocol (computed; dash-dotted grey lines: the "
        "hand-overs), with the published 8 x H100 sweep",
    )


def _figure_read_back(axes, topos, hands: dict) -> int:
    """What the drawing shows, point by point, against tuning.cc's transcribed loop and the sweep's columns."""
    bad = 0
    row = entries("nccl_tests")[PUBLISHED]
    for ax, (key, topo) in zip(axes, topos.items(), strict=True):
        cells = {k[1:]: v for k, v in hands[key].items() if k[0] == "all-reduce"}
        lines = list(ax.get_lines())
        by_name = {ln.get_label(): ln for ln in lines}
        bad += ax.get_title() != topo.label
        for (a, p), cell in cells.items():
            ln = by_name.get(label(a, p))
            ys = [] if ln is None else list(zip(ln.get_xdata(), ln.get_ydata(), strict=True))
            bad += not ys or sum(not math.isclose(y, nccl_tuning_checks.time_s(cell, x), rel_tol=1e-9) for x, y in ys)
        pick = by_name.get("NCCL's pick (smallest)")
        envelope = [] if pick is None else list(zip(pick.get_xdata(), pick.get_ydata(), strict=True))
        fastest = [min(nccl_tuning_checks.time_s(c, x) for c in cells.values()) for x, _ in envelope]
        bad += not envelope or sum(not math.isclose(y, t, rel_tol=1e-9) for (_, y), t in zip(envelope, fastest))
        dots = by_name.get("published 8 x H100 all_reduce_perf")
        if key == "node":
            shown = [] if dots is None else list(zip(dots.get_xdata(), dots.get_ydata(), strict=True))
            printed = [(s, min(a, b) / 1e6) for s, a, b in zip(row["bytes"], row["time_us"], row["inplace_time_us"])]
            bad += len(shown) != len(printed)
            bad += sum(x != s or not math.isclose(y, t, rel_tol=1e-12) for (x, y), (s, t) in zip(shown, printed))
        else:
            bad += dots is not None
        named = {label(a, p) for a, p in cells} | {"NCCL's pick (smallest)", "published 8 x H100 all_reduce_perf"}
        verticals = [ln.get_xdata() for ln in lines if ln.get_label() not in named]
        bad += any(x[0] != x[-1] for x in verticals)
        wanted = nccl_tuning_checks.hand_overs(hands[key], "all-reduce")
        drawn = sorted(x[0] for x in verticals)
        bad += len(drawn) != len(wanted) or sum(not math.isclose(d, w, rel_tol=1e-9) for d, w in zip(drawn, wanted))
    return bad


def _label_claim(r: Result, topos) -> None:
    """The communicators' labels head the tables and the figure's panels: their GPU counts against the DGX H100's
    GPUs per node (the guide's 8) times the nodes each label names, and the nodes against the model's topology."""
    per_node = value("interconnect.DGX-H100.gpus_per_node")
    bad = 0
    for topo in topos.values():
        m = re.match(r"(\d+) H100(?:, one node| on (\d+) nodes)", topo.label)
        nodes = 0 if m is None else int(m[2] or 1)
        bad += m is None or int(m[1]) != nodes * per_node or nodes != topo.nodes
    r.claim(
        "communicators' labels: GPUs = nodes x the DGX H100's 8 per node; labels off",
        bad,
        0,
        formula="; ".join(t.label for t in topos.values()),
    )
