"""Alpha-beta predictions for placement: NVLink vs InfiniBand vs PCIe, TP placed in or across nodes, hierarchical
data parallelism (experiment placement), from distlab.interconnect.topology and distlab.hardware.collectives.
"""

from __future__ import annotations

import numpy as np

from distlab.core.experiments import experiment
from distlab.core.facts import fact
from distlab.core.results import Quantity, Result
from distlab.hardware.collectives import (
    crossover_bytes,
    hierarchical_allreduce_phases,
    link_time_seconds,
    steps_and_factor,
)
from distlab.hardware.links import link, links
from distlab.interconnect import placement_checks
from distlab.interconnect.topology import ASSUMED_MFU, BF16_BYTES, DDP_BUCKET_BYTES, flat_ring_link, tp_step_seconds
from distlab.models.shapes import preset


@experiment(
    "placement",
    "alpha-beta predictions: NVLink vs InfiniBand vs PCIe, and TP placed in or across nodes",
    kind="computed",
)
def placement(device: str) -> Result:
    r = Result("placement")
    _links_table(r)
    _time_vs_size(r)
    _tp_worked(r)
    _dp_hierarchical(r)
    _overlap(r)
    placement_checks.links_table(r)
    placement_checks.source_quotes_claim(r)
    placement_checks.gb_claim(r)
    placement_checks.tp_claim(r)
    placement_checks.dp_claim(r)
    return r


def _links_table(r: Result) -> None:
    rows = []
    for name in links():
        lk = link(name)
        steps, factor = steps_and_factor("all-reduce", 8)
        half = steps * lk.alpha_s * lk.bandwidth_bytes_per_s / factor  # steps·α = factor·S/B
        rows.append(
            [
                name,
                Quantity(lk.bandwidth_bytes_per_s, "B/s"),
                Quantity(lk.bidirectional_bytes_per_s, "B/s"),
                Quantity(lk.alpha_s, "s"),
                Quantity(half, "B"),
            ]
        )
    r.table(
        "links",
        ["link", "per direction", "both directions", "α per step (NCCL LL)", "n½ of an 8-rank ring all-reduce"],
        rows,
        caption="Per-GPU (NVLink, NVSwitch), per-slot (PCIe x16) and per-port (network) bandwidth from "
        "distlab/data/interconnect.toml; n½ is the message size at which latency and bandwidth terms are equal",
    )
    nvl, ib = link("NVLink4-H100"), link("InfiniBand-NDR")
    r.add("nvlink4_per_direction", nvl.bandwidth_bytes_per_s, "B/s", "NVLink 4, per direction")
    r.add("ndr_per_direction", ib.bandwidth_bytes_per_s, "B/s", "InfiniBand NDR, per direction")
    r.add("nvlink_over_ndr", nvl.bandwidth_bytes_per_s / ib.bandwidth_bytes_per_s, "", "bandwidth ratio")
    r.add("pcie5_per_direction", link("PCIe5-x16").bandwidth_bytes_per_s, "B/s", "PCIe 5 x16, per direction")
    cross = crossover_bytes(64, alpha_s=ib.alpha_s, bandwidth_bytes_per_s=ib.bandwidth_bytes_per_s)
    r.add("ib_tree_crossover_64", cross, "B", "tree beats ring below this size, 64 ranks on NDR")
    r.claim(
        "tree/ring crossover: at that size both take the same time (64 ranks, NDR)",
        link_time_seconds("all-reduce", cross, 64, ib, "tree"),
        link_time_seconds("all-reduce", cross, 64, ib),
        rel_tol=1e-9,
        unit="s",
    )
    # Counts that pages print as numbers (a fact's footnote may not follow a digit), with the relations that the
    # data must satisfy: every NVLink generation since 3 carries 50 GB/s per link; the DGX guide and the Hopper
    # whitepaper agree on the switch chips.
    links4, links3 = fact("interconnect.NVLink4-H100.links").value, fact("interconnect.NVLink3-A100.links").value
    r.add("nvlink4_links", links4, "links", "NVLink 4 links per H100")
    per_link4 = fact("interconnect.NVLink4-H100.bidirectional_gbytes_per_s").value / links4
    per_link3 = fact("interconnect.NVLink3-A100.bidirectional_gbytes_per_s").value / links3
    r.claim("NVLink 4 and NVLink 3 carry the same bytes per link (900/18 = 600/12)", per_link4, per_link3, unit="GB/s")
    chips = fact("interconnect.NVSwitch-HGX-H100.nvswitch_chips").value
    r.add("hgx_nvswitch_chips", chips, "chips", "NVSwitch chips on an HGX H100 board")
    r.claim(
        "NVSwitch chips: the Hopper whitepaper's HGX H100 = the DGX H100 user guide's",
        chips,
        fact("interconnect.DGX-H100.nvswitch_chips").value,
    )


def _time_vs_size(r: Result) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = np.logspace(3, 10, 200)
    curves = {
        "8 GPUs, NVLink 4 (one node)": flat_ring_link(8, nodes=1),
        "8 GPUs on 2 nodes, NDR (4 NICs/node)": flat_ring_link(4, nodes=2),
        "8 GPUs on 8 nodes, NDR (1 NIC each)": flat_ring_link(1, nodes=8),
        "8 GPUs, PCIe 5 x16": link("PCIe5-x16"),
    }
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, lk in curves.items():
        ax.loglog(sizes, [link_time_seconds("all-reduce", s, 8, lk) for s in sizes], label=label)
    ax.set_xlabel("all-reduce message size (bytes)")
    ax.set_ylabel("predicted seconds (ring)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    placement_checks.figure_claim(r, ax)
    r.figure(
        "time_vs_size",
        fig,
        "Predicted ring all-reduce time on 8 GPUs vs message size: flat left of n½ "
        "(latency), slope 1 right of it (bandwidth)",
    )
    big = 1e9
    nvl = link_time_seconds("all-reduce", big, 8, curves["8 GPUs, NVLink 4 (one node)"])
    ib8 = link_time_seconds("all-reduce", big, 8, curves["8 GPUs on 8 nodes, NDR (1 NIC each)"])
    r.add("gb_allreduce_nvlink_s", nvl, "s", "1 GB all-reduce, 8 GPUs on NVLink 4")
    r.add("gb_allreduce_ib_s", ib8, "s", "1 GB all-reduce, 8 GPUs on 8 nodes of NDR")
    r.claim(
        "1 GB all-reduce: IB/NVLink time ratio approaches the bandwidth ratio",
        ib8 / nvl,
        link("NVLink4-H100").bandwidth_bytes_per_s / link("InfiniBand-NDR").bandwidth_bytes_per_s,
        rel_tol=0.01,
        formula="bandwidth regime: t ≈ 2(p-1)/p · S/B, the α term < 1 %",
    )


def _tp_worked(r: Result) -> None:
    model = "70B"
    m = preset(model)
    r.add("tp_model_params", m.params(), "params", f"{m.name} parameters")
    r.add("tp_layers", m.layers, "", "layers")
    r.add("tp_hidden", m.hidden, "", "hidden width")
    r.add("tp_seq", m.seq, "tokens", "sequence length")
    r.add("assumed_mfu", ASSUMED_MFU, "fraction", "assumed model FLOPs utilisation")
    rows = []
    for label, gpn in (("one node, NVLink 4", 8), ("2 nodes x 4 GPUs, NDR", 4), ("8 nodes x 1 GPU, NDR", 1)):
        t = tp_step_seconds(model, 8, gpn)
        rows.append(
            [
                label,
                Quantity(t["bandwidth_bytes_per_s"], "B/s"),
                Quantity(t["per_allreduce_s"], "s"),
                Quantity(t["comm_s"], "s"),
                Quantity(t["compute_s"], "s"),
                t["comm_s"] / t["compute_s"],
            ]
        )
        key = {8: "node", 4: "two_nodes", 1: "eight_nodes"}[gpn]
        r.add(f"tp_{key}_comm_s", t["comm_s"], "s", f"TP=8 {label}: communication per micro-batch")
        r.add(f"tp_{key}_per_allreduce_s", t["per_allreduce_s"], "s", f"TP=8 {label}: one all-reduce")
        r.add(f"tp_{key}_comm_over_compute", t["comm_s"] / t["compute_s"], "", f"TP=8 {label}: comm / compute")
    r.add("tp_message_bytes", t["message_bytes"], "B", "one TP all-reduce: b·s·h·2 bytes (b = 1)")
    r.add("tp_allreduces", t["allreduces"], "", "TP all-reduces per micro-batch (4L)")
    r.add("tp_compute_peak_s", t["compute_peak_s"], "s", "compute per micro-batch at peak, per GPU")
    r.add("tp_compute_s", t["compute_s"], "s", "compute per micro-batch at the assumed MFU")
    r.table(
        "tp",
        [
            "TP=8 placement",
            "ring bandwidth per rank",
            "one all-reduce",
            "per micro-batch (4L of them)",
            "compute per micro-batch",
            "comm / compute",
        ],
        rows,
        caption=f"{m.name}, micro-batch 1, sequence {m.seq}, bf16 activations, no sequence parallelism; compute "
        f"is 6·Ψ·tokens / (TP · peak · MFU) on H100 SXM",
    )
    q = r.quantities
    r.add(
        "tp_bad_placement_extra_s",
        q["tp_eight_nodes_comm_s"].value - q["tp_node_comm_s"].value,
        "s",
        "extra communication per micro-batch, 8 nodes vs one",
    )


def _dp_hierarchical(r: Result) -> None:
    """Data parallelism's gradient all-reduce over 4 nodes of 8: flat rings vs the two-level algorithm."""
    m = preset("7B")
    grad_bytes = BF16_BYTES * m.params()
    r.add("dp_grad_bytes", grad_bytes, "B", f"{m.name} bf16 gradients")
    rows = []
    for label, size in (("7B gradients, bf16", grad_bytes), ("one 1 MB bucket", 1e6)):
        phases = hierarchical_allreduce_phases(size, 8, 4)
        times = {
            "flat_eight_nics": link_time_seconds("all-reduce", size, 32, flat_ring_link(8, nodes=4)),
            "flat_one_nic": link_time_seconds("all-reduce", size, 32, flat_ring_link(1, nodes=4)),
            "hier": sum(phases.values()),
            "hier_pipelined": max(phases.values()),
        }
        rows.append([label, Quantity(size, "B")] + [Quantity(t, "s") for t in times.values()])
        key = "dp" if size == grad_bytes else "dp_small"
        for k, t in times.items():
            r.add(f"{key}_{k}_s", t, "s", f"{label}: {k.replace('_', ' ')}")
        if size == grad_bytes:
            for k, t in phases.items():
                r.add(f"dp_phase_{k.split()[0].replace('-', '_')}_s", t, "s", f"hierarchical phase: {k}")
    r.table(
        "dp",
        [
            "message",
            "bytes",
            "flat ring, 8 NICs/node",
            "flat ring, 1 NIC/node",
            "hierarchical (phases summed)",
            "hierarchical (phases pipelined: largest)",
        ],
        rows,
        caption="All-reduce over 4 DGX H100 nodes x 8 GPUs (NVLink 4 inside, NDR between), ring model",
    )


def _overlap(r: Result) -> None:
    """DP gradient all-reduce overlapped with backward (DDP buckets): the exposed part is what is left
    when backward ends, at least the last bucket (it is ready only then). 7B on 4 nodes x 8 H100."""
    m = preset("7B")
    grad_bytes = BF16_BYTES * m.params()
    lk = flat_ring_link(8, nodes=4)
    comm = link_time_seconds("all-reduce", grad_bytes, 32, lk)
    last = link_time_seconds("all-reduce", DDP_BUCKET_BYTES, 32, lk)
    peak = fact("gpus.H100-SXM.bf16_dense_tflops").value * 1e12
    r.add("overlap_comm_s", comm, "s", "7B gradient all-reduce, 32 GPUs")
    r.add("overlap_last_bucket_s", last, "s", "the last 25 MiB bucket's all-reduce")
    r.add("ddp_bucket_bytes", DDP_BUCKET_BYTES, "B", "DDP's default bucket")
    rows = []
    for tokens in (256, 1024, 4096):
        backward = 4 * m.params() * tokens / (peak * ASSUMED_MFU)  # backward is 2/3 of 6·Ψ·tokens
        exposed = max(comm - backward, 0.0) + last
        rows.append(
            [
                tokens,
                Quantity(backward, "s"),
                Quantity(comm, "s"),
                Quantity(exposed, "s"),
                f"{100 * exposed / (backward + exposed):.1f} %",
            ]
        )
        r.add(f"overlap_{tokens}_exposed_s", exposed, "s", f"{tokens} tokens per GPU: exposed communication")
        r.add(f"overlap_{tokens}_backward_s", backward, "s", f"{tokens} tokens per GPU: backward")
    r.table(
        "overlap",
        [
            "tokens per GPU per step",
            "backward",
            "gradient all-reduce",
            "exposed ≈ max(comm − backward, 0) + last bucket",
            "exposed share of backward + exposed",
        ],
        rows,
        caption=f"{m.name}, 4 nodes x 8 H100 (NVLink 4, NDR), flat ring, backward = 4·Ψ·tokens / (peak · MFU)",
    )
