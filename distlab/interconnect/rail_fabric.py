"""rail-fabric: a rail-optimized fat tree (DGX SuperPOD) against a plain fat tree built from the same switches.

In a rail-optimized fabric, NIC i of every node of a scalable unit (SU) goes to leaf switch i (rail i): GPU i of one
node reaches GPU i of any node in its SU through one switch. A plain fat tree wires all of a node's NICs to the same
leaf, so a leaf serves radix/2 / NICs-per-node whole nodes. With the same leaves, spines and cables, both are
non-blocking (every leaf has as many up-ports as down-ports): the bisection bandwidth per GPU is the same. What the
rails change is *which* traffic reaches the spine. NCCL builds one ring (or tree) per channel through same-index
GPUs and NICs (NCCL_CROSS_NIC=0/2 keeps them on one rail), so its inter-node traffic stays on the leaves: one switch
hop, no spine contention with other jobs. Traffic between different rails (an all-to-all without NVLink forwarding)
goes through the spine in both designs.

Everything is counted from cluster_fabric.toml (the DGX B200 SuperPOD's component table, 400 Gb/s NDR rails).
"""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.facts import entries, value
from distlab.core.results import Quantity, Result
from distlab.hardware.links import per_direction_bytes_per_s
from distlab.interconnect import placement_checks

NIC = "InfiniBand-NDR"


def superpods() -> list[dict]:
    """The SuperPOD rows (2 to 64 SUs), with their names."""
    return [dict(name=k, **v) for k, v in entries("cluster_fabric").items() if k.startswith("dgx-superpod-b200-")]


def ports(row: dict) -> dict[str, float]:
    """Ports each switch uses, from the cable counts: leaf down/up, spine down/up, core down."""
    out = {
        "leaf_down": row["node_leaf_cables"] / row["leaf_switches"],
        "leaf_up": row["leaf_spine_cables"] / row["leaf_switches"],
        "spine_down": row["leaf_spine_cables"] / row["spine_switches"],
        "spine_up": row["spine_core_cables"] / row["spine_switches"],
    }
    out["core_down"] = row["spine_core_cables"] / row["core_switches"] if row["core_switches"] else 0.0
    return out


def bisection_per_gpu(row: dict, nic: str = NIC) -> float:
    """Bytes/s per GPU across the worst cut into two halves: each tier's uplinks over the GPUs below them, the
    smallest (a tier with fewer up- than down-ports is oversubscribed), times the port rate."""
    rate = per_direction_bytes_per_s(nic)
    tiers = [row["leaf_spine_cables"] / row["gpus"]]
    if row["core_switches"]:
        tiers.append(row["spine_core_cables"] / row["gpus"])
    return min(1.0, *tiers) * rate


def spine_share_of_rail_ring(nodes_per_su: int, nodes_per_leaf: int, rail_optimized: bool) -> float:
    """Share of a rail-aligned ring's inter-node hops (GPU i of node k to GPU i of node k+1, the SU's nodes in order)
    that leave their leaf switch: 0 with rails (all of rail i is on leaf i); with whole nodes per leaf, the hops
    between the last node of one leaf and the first of the next, counted."""
    if rail_optimized:
        return 0.0
    crossing = sum(1 for k in range(nodes_per_su) if k // nodes_per_leaf != ((k + 1) % nodes_per_su) // nodes_per_leaf)
    return crossing / nodes_per_su


@experiment(
    "rail-fabric",
    "rail-optimized fat tree vs a plain fat tree from the same switches: bisection bandwidth per GPU, switch ports, "
    "and the spine traffic of NCCL's rail-aligned rings",
    kind="computed",
)
def rail_fabric(device: str) -> Result:
    r = Result("rail-fabric", kind="computed")
    radix = value("cluster_fabric.qm9700.ports")
    gpus_per_node = value("interconnect.DGX-H100.gpus_per_node")
    nic = per_direction_bytes_per_s(NIC)
    rows = []
    for row in superpods():
        p = ports(row)
        su = row["su"]
        r.claim(f"{su} SUs: one leaf port per GPU (node-leaf cables = GPUs)", row["node_leaf_cables"], row["gpus"])
        r.claim(
            f"{su} SUs: every leaf uses all {radix} ports, half down, half up",
            p["leaf_down"] + p["leaf_up"],
            radix,
            formula=f"down {p['leaf_down']:g} + up {p['leaf_up']:g}",
        )
        r.claim(
            f"{su} SUs: leaves per SU = rails = GPUs per node",
            row["leaf_switches"] / su,
            value("cluster_fabric.dgx-superpod-h100.rails"),
        )
        spine_ports = p["spine_down"] + p["spine_up"]
        r.claim(f"{su} SUs: every spine uses all {radix} ports", spine_ports, radix)
        if row["core_switches"]:
            r.claim(f"{su} SUs: every core switch uses all {radix} ports", p["core_down"], radix)
        bis = bisection_per_gpu(row)
        r.claim(
            f"{su} SUs: non-blocking: bisection bandwidth per GPU = the NIC's rate",
            bis,
            nic,
            rel_tol=1e-12,
            unit="B/s",
        )
        rows.append(
            [
                su,
                row["nodes"],
                row["gpus"],
                f"{row['leaf_switches']} / {row['spine_switches']} / {row['core_switches']}",
                f"{p['leaf_down']:g} + {p['leaf_up']:g}",
                "2 (leaf, spine)" if not row["core_switches"] else "3 (leaf, spine, core)",
                Quantity(bis, "B/s"),
            ]
        )
    r.table(
        "superpod",
        ["SUs", "nodes", "GPUs", "leaf / spine / core switches", "leaf ports down + up", "tiers", "bisection per GPU"],
        rows,
        caption="DGX SuperPOD (B200 reference architecture) component counts, 400 Gb/s NDR rails; derived ports "
        "and bisection; computed",
    )
    nodes_per_su = value("cluster_fabric.dgx-superpod-h100.nodes_per_su")
    leaf_down = ports(superpods()[0])["leaf_down"]
    nodes_per_leaf = int(leaf_down // gpus_per_node)
    rail = spine_share_of_rail_ring(nodes_per_su, nodes_per_leaf, rail_optimized=True)
    plain = spine_share_of_rail_ring(nodes_per_su, nodes_per_leaf, rail_optimized=False)
    r.add("radix", radix, "ports", "QM9700 NDR ports")
    r.add("nodes_per_su", nodes_per_su, "nodes", "nodes per scalable unit")
    r.add("nodes_per_leaf_plain", nodes_per_leaf, "nodes", "plain tree: whole nodes per leaf (32 down-ports / 8 NICs)")
    r.add("ring_spine_share_rail", rail, "fraction", "rail-optimized: share of ring hops through the spine")
    r.add("ring_spine_share_plain", plain, "fraction", "plain tree: share of ring hops through the spine")
    r.claim(
        "plain tree: a ring over the SU's nodes leaves its leaf once per leaf (leaves / nodes of the hops)",
        plain,
        (nodes_per_su / nodes_per_leaf) / nodes_per_su,
        rel_tol=1e-12,
        formula="counted hop by hop, against 1 / nodes per leaf",
    )
    cross_rail = (gpus_per_node - 1) / gpus_per_node
    r.add("alltoall_cross_rail", cross_rail, "fraction", "all-to-all between nodes: share of bytes between rails")
    r.add(
        "alltoall_plain_spine",
        1 - (nodes_per_leaf - 1) / (nodes_per_su - 1),
        "fraction",
        "plain tree: share of an SU-wide all-to-all's inter-node bytes through the spine",
    )
    r.table(
        "compare",
        ["", "rail-optimized", "plain fat tree, same switches"],
        [
            ["bisection bandwidth per GPU", Quantity(nic, "B/s"), Quantity(nic, "B/s")],
            ["switch hops, GPU i to GPU i of another node in the SU", "1 (its rail's leaf)", "1 or 3 (via a spine)"],
            ["NCCL ring hops through the spine", f"{100 * rail:.0f} %", f"{100 * plain:.1f} %"],
            [
                "all-to-all bytes through the spine, NCCL's PXN (NVLink to the GPU on the right rail first)",
                "0 %",
                f"{100 * (1 - (nodes_per_leaf - 1) / (nodes_per_su - 1)):.1f} %",
            ],
            [
                "all-to-all bytes through the spine (no NVLink forwarding)",
                f"{100 * cross_rail:.1f} %",
                f"{100 * (1 - (nodes_per_leaf - 1) / (nodes_per_su - 1)):.1f} %",
            ],
        ],
        caption=f"One SU of {nodes_per_su} DGX nodes x {gpus_per_node} GPUs, one NDR NIC per GPU; computed",
    )
    placement_checks.rail_claim(r)
    placement_checks.superpod_rows_claim(r)
    return r
