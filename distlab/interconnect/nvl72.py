"""nvl72-placement: placement inside a 72-GPU NVLink domain (GB200 NVL72), computed.

In an HGX node the NVLink domain is 8 GPUs and everything larger crosses InfiniBand. A GB200 NVL72 rack puts 72
GPUs, in compute trays of 4, behind NVLink switches: every GPU reaches every other of the rack at its full NVLink 5
rate, so a tray boundary costs nothing and the domain, not the node, is the unit of placement. The worked
example: which groups fit inside it (TP 8 and 16, EP 64), what they cost there against the same group on
H100 nodes over InfiniBand, and what is left for the network between racks (PP and DP).

Not modelled: the planner's search (chapter 12) still takes a node to be the NVLink domain; the GB200's own
compute figures (the example times communication, and uses the B200 entry of gpus.toml where it needs a peak).
"""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.facts import value
from distlab.core.results import Result
from distlab.hardware.collectives import link_time_seconds
from distlab.hardware.links import per_direction_bytes_per_s
from distlab.interconnect import placement_checks
from distlab.interconnect.topology import ASSUMED_MFU, BF16_BYTES, TP_ALLREDUCES_PER_LAYER, flat_ring_link
from distlab.model_parallel.expert_parallel_cost import break_even_ffn, moe_shape
from distlab.models.shapes import preset

RACK = "NVSwitch-GB200-NVL72"
RACKS = 4  # the worked example's job: 4 racks, 288 GPUs


def _rack(field: str):
    return value(f"interconnect.{RACK}.{field}")


@experiment(
    "nvl72-placement",
    "placement inside a 72-GPU NVLink domain (GB200 NVL72): TP and EP inside the rack against H100 nodes over "
    "InfiniBand, PP and DP across racks",
    kind="computed",
)
def nvl72_placement(device: str) -> Result:
    r = Result("nvl72-placement")
    gpus, tray = _rack("gpus_per_domain"), _rack("gpus_per_tray")
    r.add("gpus", gpus, "GPUs", "GPUs in one NVLink domain")
    r.add("trays", gpus // tray, "", "compute trays of the rack")
    r.add("gpus_per_tray", tray, "GPUs", "GPUs per compute tray")
    r.claim(
        "72 GPUs = superchips x GPUs per superchip (a typo breaks it)",
        gpus,
        _rack("superchips") * _rack("gpus_per_superchip"),
    )
    r.claim("trays of 4 divide the rack", gpus % tray, 0)
    per_gpu = _rack("bidirectional_gbytes_per_s") / 1000
    r.claim(
        "aggregate NVLink = 72 x 1.8 TB/s per GPU",
        _rack("aggregate_nvlink_tbytes_per_s"),
        gpus * per_gpu,
        rel_tol=0.01,
        unit="TB/s",
        formula="130 printed, 129.6 by multiplication",
    )
    _tp(r)
    _ep(r)
    _layout(r)
    placement_checks.nvl72_claim(r)
    return r


def _tp(r: Result, model: str = "70B") -> None:
    """TP all-reduces of one micro-batch (forward + backward) for Llama 2 70B: NVL72 vs HGX H100 nodes."""
    m = preset(model)
    message = m.seq * m.hidden * BF16_BYTES  # micro-batch 1
    count = TP_ALLREDUCES_PER_LAYER * m.layers
    rows = []
    cases = [
        ("TP 8, HGX H100: one node, NVLink 4", 8, flat_ring_link(8, "NVLink4-H100", "InfiniBand-NDR", 1)),
        (
            "TP 8, NVL72: two trays, NVLink 5 through the switches",
            8,
            flat_ring_link(8, "NVLink5-B200", "InfiniBand-NDR", 1),
        ),
        (
            "TP 16, HGX H100: two nodes over NDR, a NIC per GPU",
            16,
            flat_ring_link(8, "NVLink4-H100", "InfiniBand-NDR", 2),
        ),
        ("TP 16, NVL72: four trays, NVLink 5", 16, flat_ring_link(16, "NVLink5-B200", "InfiniBand-NDR", 1)),
    ]
    times = {}
    for label, tp, lk in cases:
        seconds = count * link_time_seconds("all-reduce", message, tp, lk)
        times[label] = seconds
        rows.append([label, lk.bandwidth_bytes_per_s / 1e9, seconds * 1e3])
    r.table(
        "tp",
        ["TP group", "per-direction GB/s per GPU", "all-reduces per micro-batch (ms)"],
        rows,
        caption=f"Llama 2 70B, {count} all-reduces of {message / 1e6:.1f} MB (micro-batch 1, s = {m.seq}); "
        "alpha-beta model at the links' line rates.",
    )
    t16_hgx, t16_nvl = times[cases[2][0]], times[cases[3][0]]
    r.add("tp16_hgx_ms", t16_hgx * 1e3, "ms", "TP 16 over two HGX nodes")
    r.add("tp16_nvl72_ms", t16_nvl * 1e3, "ms", "TP 16 inside NVL72")
    r.add("tp16_ratio", t16_hgx / t16_nvl, "", "TP 16: HGX over NDR / NVL72")
    nvl5, ndr8 = per_direction_bytes_per_s("NVLink5-B200"), 8 * per_direction_bytes_per_s("InfiniBand-NDR")
    r.claim(
        "TP 16 across HGX nodes / inside NVL72 ≈ NVLink 5 / (8 NDR NICs), the bandwidth regime",
        t16_hgx / t16_nvl,
        nvl5 / ndr8,
        rel_tol=0.15,
        formula="900 GB/s / (8 x 50 GB/s); latency terms aside",
    )


def _ep(r: Result) -> None:
    """The expert width above which EP 64's all-to-all hides behind the experts: across 8 HGX H100 nodes (one NDR
    NIC per GPU) or inside one NVL72 (every byte on NVLink 5)."""
    hgx = break_even_ffn(
        64,
        peak_flops=value("gpus.H100-SXM.bf16_dense_tflops") * 1e12,
        mfu=ASSUMED_MFU,
        gpus_per_node=8,
        nic="InfiniBand-NDR",
    )
    nvl = break_even_ffn(
        64,
        peak_flops=value("gpus.B200.bf16_dense_tflops") * 1e12,
        mfu=ASSUMED_MFU,
        gpus_per_node=_rack("gpus_per_tray"),
        nic=RACK,
    )
    ds = moe_shape("DeepSeek-V3").moe_ffn
    r.add("ep64_hgx_fstar", hgx, "", "EP 64 over 8 H100 nodes: break-even expert width")
    r.add("ep64_nvl72_fstar", nvl, "", "EP 64 inside NVL72 (B200 peak, NVLink 5): break-even expert width")
    r.add("deepseek_ffn", ds, "", "DeepSeek-V3 expert width")
    by_hand_hgx = 4 * 2 * (56 / 64) * value("gpus.H100-SXM.bf16_dense_tflops") * 1e12 * ASSUMED_MFU / (18 * 50e9)
    r.claim("EP 64 over HGX: f* by hand", hgx, by_hand_hgx, rel_tol=1e-9, formula="4 b (e-g)/e peak MFU / (18 B)")
    by_hand_nvl = 4 * 2 * (60 / 64) * value("gpus.B200.bf16_dense_tflops") * 1e12 * ASSUMED_MFU / (18 * 900e9)
    r.claim("EP 64 in NVL72: f* by hand (trays of 4 count as local)", nvl, by_hand_nvl, rel_tol=1e-9)
    r.claim("DeepSeek-V3's experts are below the HGX break-even (cross-node EP is exposed)", ds, hgx, relation="<=")
    r.claim("... and above NVL72's (EP 64 hides inside the rack)", ds, nvl, relation=">=")


def _layout(r: Result, seq: int = 4096) -> None:
    """The worked layout for DeepSeek-V3 on 4 racks: per rack EP 64 on 16 trays (4 experts per GPU), 2 trays
    spare; PP 4 across the racks over InfiniBand. The PP hop per micro-batch against the NIC, and what crosses
    the racks against what stays in them."""
    m = moe_shape("DeepSeek-V3")
    ep = 64
    gpus = _rack("gpus_per_domain")
    spare = gpus - ep
    r.add("layout_ep", ep, "GPUs", "EP group inside a rack")
    r.add("layout_spare", spare, "GPUs", "GPUs per rack left out of the EP group")
    r.add("layout_spare_trays", spare // _rack("gpus_per_tray"), "", "whole trays spare")
    r.add("layout_experts_per_gpu", m.experts // ep, "", "routed experts per GPU")
    r.add("layout_pp", RACKS, "", "pipeline stages, one per rack")
    r.add("layout_layers_max", -(-m.layers // RACKS), "", "layers on the fullest stage")
    r.add("layout_layers", m.layers, "", "DeepSeek-V3's layers")
    r.claim("EP 64 leaves whole trays spare", spare % _rack("gpus_per_tray"), 0)
    r.claim("routed experts divide evenly over EP 64", m.experts % ep, 0)
    hop = seq * m.hidden * BF16_BYTES  # one micro-batch's activation, per GPU of the stage boundary
    nic = per_direction_bytes_per_s("InfiniBand-NDR")
    r.add("pp_hop_bytes", hop, "B", "activation per micro-batch crossing a stage boundary")
    r.add("pp_hop_ms", hop / nic * 1e3, "ms", "its time over one NDR NIC")
    r.claim(
        "PP hop time by hand",
        hop / nic,
        seq * m.hidden * 2 / 50e9,
        rel_tol=1e-12,
        unit="s",
        formula="s h x 2 B / 50 GB/s",
    )
