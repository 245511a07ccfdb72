"""ep-alltoall: expert parallelism's all-to-all timed for a Mixtral-style and a DeepSeek-style layer, inside a node and
across nodes, against the expert compute it must hide behind (formulas: distlab.model_parallel.expert_parallel_cost).

Checks: the shapes of moe_models.toml give the published parameter counts; the in-node time is the alpha-beta model's
all-to-all (distlab.hardware.collectives, a separate implementation); across nodes the time ratio is the bandwidth
ratio; the expected number of nodes a DeepSeek token needs matches a Monte Carlo of its routing.
"""

from __future__ import annotations

import numpy as np

from distlab.core.experiments import experiment
from distlab.core.facts import value
from distlab.core.results import Quantity, Result
from distlab.hardware.collectives import link_time_seconds
from distlab.hardware.gpus import gpu
from distlab.interconnect.topology import ASSUMED_MFU
from distlab.model_parallel import ep_checks
from distlab.model_parallel.expert_parallel_cost import (
    ALLTOALLS_PER_LAYER,
    SWIGLU_MATRICES,
    MoEShape,
    alltoall_over_compute,
    alltoall_seconds,
    break_even_ffn,
    expected_nodes,
    expert_flops_per_token,
    moe_params,
    moe_shape,
    nvlink_effective,
)

TOKENS_PER_GPU = 4096  # one 4096-token sequence per GPU per micro-batch: a stated scenario, not a fact
GPU = "H100-SXM"
NODE = 8  # GPUs of an H100 node
# (model, EP, GPUs of the group per node, node-limited routing): the layouts the page chooses to show
LAYOUTS = (
    ("Mixtral-8x7B", 8, 8, False),
    ("Mixtral-8x7B", 8, 4, False),
    ("Mixtral-8x7B", 8, 1, False),
    ("DeepSeek-V3", 8, 8, False),
    ("DeepSeek-V3", 64, 8, False),
    ("DeepSeek-V3", 64, 8, True),
    ("DeepSeek-V3", 256, 8, False),
)


def _label(ep: int, g: int, limited: bool) -> str:
    """The table's words for a layout, from its numbers (so the row says what was computed)."""
    if ep <= g:
        return f"EP {ep} in one node"
    each = "" if g == NODE else f" ({g} GPU{'s' if g > 1 else ''} each)"
    return f"EP {ep} over {ep // g} nodes{each}" + (", node-limited routing" if limited else "")


def _key(model: str, ep: int, g: int, limited: bool) -> str:
    return f"{'mixtral' if model.startswith('Mixtral') else 'deepseek'}_ep{ep}_g{g}{'_limited' if limited else ''}"


@experiment(
    "ep-alltoall",
    "expert parallelism's all-to-all inside a node and across nodes for Mixtral 8x7B and DeepSeek-V3 layers, "
    "against the expert compute it must hide behind",
    kind="computed",
)
def ep_alltoall(device: str) -> Result:
    r = Result("ep-alltoall", kind="computed")
    peak = gpu(GPU).peak_flops("bf16")
    r.add("tokens_per_gpu", TOKENS_PER_GPU, "tokens", "scenario: tokens per GPU per micro-batch")
    r.add("assumed_mfu", ASSUMED_MFU, "fraction", "the expert compute's assumed MFU (chapter 9's)")
    _params(r)
    rows = []
    for model, ep, g, limited in LAYOUTS:
        text = _label(ep, g, limited)
        shape = moe_shape(model)
        t = alltoall_seconds(shape, ep, TOKENS_PER_GPU, gpus_per_node=g, node_limited=limited)
        compute = TOKENS_PER_GPU * expert_flops_per_token(shape) / (peak * ASSUMED_MFU)
        ratio = alltoall_over_compute(
            shape, ep, TOKENS_PER_GPU, peak_flops=peak, mfu=ASSUMED_MFU, gpus_per_node=g, node_limited=limited
        )
        key = _key(model, ep, g, limited)
        r.add(f"{key}_alltoall_s", t["seconds"], "s", f"{model}, {text}: one dispatch all-to-all")
        r.add(f"{key}_layer_s", ALLTOALLS_PER_LAYER * t["seconds"], "s", f"{model}, {text}: 4 all-to-alls")
        r.add(f"{key}_ratio", ratio, "", f"{model}, {text}: all-to-all / expert compute")
        r.add(f"{key}_network_bytes", t["network_bytes"], "B", f"{model}, {text}: bytes through the NIC")
        rows.append(
            [
                shape.name,
                text,
                Quantity(t["bytes"], "B"),
                Quantity(t["nvlink_bytes"], "B"),
                Quantity(t["network_bytes"], "B"),
                Quantity(ALLTOALLS_PER_LAYER * t["seconds"], "s"),
                Quantity(compute, "s"),
                f"{ratio:.2f}",
                "hidden by overlap, if overlapped" if ratio < 1 else "exposed: cannot be hidden",
            ]
        )
        if ep == g:  # inside one node: the alpha-beta all-to-all of distlab.hardware.collectives
            ref = link_time_seconds("all-to-all", t["bytes"], ep, nvlink_effective())
            r.claim(
                f"{shape.name}, {text}: all-to-all time = the alpha-beta model's (hardware.collectives)",
                t["seconds"],
                ref,
                rel_tol=1e-9,
                unit="s",
                formula="(p-1) α + (p-1)/p S/B at NCCL's effective NVLink rate",
            )
        if key.endswith("_limited"):
            r.add(f"{key}_copies", t["network_bytes"] / (t["bytes"] / shape.top_k), "", "network copies per token")
    for model in ("Mixtral-8x7B", "DeepSeek-V3"):
        shape = moe_shape(model)
        r.add(
            f"{_key(model, 0, 0, False).split('_')[0]}_flops_per_token",
            expert_flops_per_token(shape),
            "FLOP",
            f"{shape.name}: expert FLOPs per token per MoE layer (forward + backward)",
        )
    r.table(
        "alltoall",
        [
            "model",
            "EP layout",
            "S per all-to-all (per GPU)",
            "over NVLink",
            "over the NIC",
            "4 all-to-alls per layer",
            "expert compute per layer",
            "all-to-all / compute",
            "verdict",
        ],
        rows,
        caption=f"One MoE layer, {TOKENS_PER_GPU} tokens per GPU, bf16 activations, uniform routing, no capacity "
        f"padding; H100 SXM nodes (NVLink 4 at NCCL's effective rate, one 400 Gb/s NDR NIC per GPU); expert compute at "
        f"{100 * ASSUMED_MFU:.0f} % MFU; computed",
    )
    _bandwidth_ratio(r)
    _break_even(r, peak)
    _node_limited(r)
    _memory(r)
    ep_checks.check(r, {_key(*layout): layout for layout in LAYOUTS}, ASSUMED_MFU)
    return r


def _params(r: Result) -> None:
    total, active = moe_params("DeepSeek-V3")
    r.add("deepseek_params", total / 1e9, "billion parameters", "DeepSeek-V3 parameters counted from its config")
    r.add("deepseek_active", active / 1e9, "billion parameters", "DeepSeek-V3 parameters active per token")
    r.claim(
        "DeepSeek-V3's config counts to its README's 671B parameters (MTP module excluded)",
        total / 1e9,
        value("moe_models.DeepSeek-V3.params_published_billion"),
        rel_tol=0.01,
        unit="B params",
        formula="MLA attention + 3 dense + 58 MoE layers (256 routed + 1 shared SwiGLU) + embeddings and head",
    )
    r.claim(
        "DeepSeek-V3's config counts to its README's 37B active parameters",
        active / 1e9,
        value("moe_models.DeepSeek-V3.active_params_published_billion"),
        rel_tol=0.03,
        unit="B params",
        formula="the same with 8 routed + 1 shared expert per token",
    )
    total, active = moe_params("Mixtral-8x7B")
    r.add("mixtral_params", total / 1e9, "billion parameters", "Mixtral 8x7B parameters counted from its config")
    r.add("mixtral_active", active / 1e9, "billion parameters", "Mixtral 8x7B parameters active per token (top-2)")


def _bandwidth_ratio(r: Result) -> None:
    shape = moe_shape("DeepSeek-V3")
    inside = alltoall_seconds(shape, 8, TOKENS_PER_GPU)
    across = alltoall_seconds(shape, 64, TOKENS_PER_GPU)
    nic = value("interconnect.InfiniBand-NDR.gbits_per_s_per_direction") * 1e9 / 8
    nvl = value("interconnect.nccl-nvlink4.effective_gbytes_per_s") * 1e9
    r.add("across_over_inside", across["seconds"] / inside["seconds"], "", "DeepSeek-V3: EP 64 / EP 8 all-to-all")
    r.claim(
        "DeepSeek-V3, EP 64 vs EP 8: the time ratio = NVLink / NIC bandwidth (7/8 of S either way)",
        across["seconds"] / inside["seconds"],
        nvl / nic,
        rel_tol=0.05,
        formula="bandwidth regime: (p-1) α is a few % of 470 MB at these rates",
    )


def _break_even(r: Result, peak: float) -> None:
    """The rule: a cross-node EP all-to-all can hide behind the experts only if they are wider than f*."""
    for ep, g in ((64, 8), (8, 1)):
        f_star = break_even_ffn(ep, peak_flops=peak, mfu=ASSUMED_MFU, gpus_per_node=g)
        r.add(f"break_even_ffn_ep{ep}_g{g}", f_star, "", f"expert width at which EP {ep} over nodes of {g} breaks even")
        probe = MoEShape(name="probe", layers=1, hidden=4096, moe_ffn=round(f_star), experts=ep, top_k=2)
        tokens = 16 * TOKENS_PER_GPU  # enough that the (e-1) latency steps are ~1 % (the rule leaves them out)
        ratio = alltoall_over_compute(probe, ep, tokens, peak_flops=peak, mfu=ASSUMED_MFU, gpus_per_node=g)
        r.claim(
            f"EP {ep} over nodes of {g}: an expert of width f* has all-to-all = compute",
            ratio,
            1.0,
            rel_tol=0.03,
            formula=f"f* = 4 b (e-g)/e peak MFU / (18 B_nic), against the full model at {tokens} tokens per GPU",
        )
    for model in ("Mixtral-8x7B", "DeepSeek-V3"):
        r.add(f"{model.split('-')[0].lower()}_moe_ffn", moe_shape(model).moe_ffn, "", f"{model}: expert width")


def _node_limited(r: Result) -> None:
    """DeepSeek-V3's group-limited routing, uniform inside the chosen groups, by simulation."""
    shape = moe_shape("DeepSeek-V3")
    groups, chosen, k = shape.expert_groups, shape.limited_groups, shape.top_k
    per_group = shape.experts // groups
    rng = np.random.default_rng(0)
    samples = 40_000
    picked = np.argsort(rng.random((samples, groups)), axis=1)[:, :chosen]  # M groups (= nodes), uniformly
    experts = np.argsort(rng.random((samples, chosen * per_group)), axis=1)[:, :k]  # k experts among them
    nodes = np.take_along_axis(picked, experts // per_group, axis=1)  # (samples, k): the node of each expert
    ordered = np.sort(nodes, axis=1)
    distinct = 1 + (np.diff(ordered, axis=1) != 0).sum(axis=1)
    own = rng.integers(0, groups, samples)  # the token's own node
    hit_own = (nodes == own[:, None]).any(axis=1)
    mc_distinct = float(distinct.mean())
    mc_remote = float((distinct - hit_own).mean())
    closed = expected_nodes(k, chosen, per_group)
    r.add("deepseek_groups", groups, "groups", "DeepSeek-V3: expert groups (n_expert_groups)")
    r.add("deepseek_limited_groups", chosen, "groups", "groups a token may use (n_limited_groups)")
    r.claim(
        "DeepSeek-V3's config: the groups split the routed experts evenly, and a token's k fit in its groups",
        shape.experts % groups + max(0, k - chosen * per_group),
        0,
    )
    r.add("deepseek_distinct_nodes", closed, "nodes", "DeepSeek-V3: expected nodes a token's 8 experts span")
    r.add("deepseek_remote_nodes", closed * (1 - 1 / groups), "nodes", "of them, not the token's own")
    r.add("deepseek_plain_copies", k * (64 - 8) / 64, "", "network copies per token without node-limited routing")
    r.claim(
        "DeepSeek-V3 routing: E[distinct nodes] closed form = Monte Carlo of the routing",
        closed,
        mc_distinct,
        rel_tol=0.01,
        unit="nodes",
        formula=f"M (1 - C((M-1)G, k)/C(MG, k)), {samples:,} simulated tokens",
    )
    r.claim(
        "DeepSeek-V3, EP 64 over 8 nodes, node-limited: the all-to-all's network copies per token = the simulated "
        "routing's remote nodes",
        r.quantities["deepseek_ep64_g8_limited_copies"].value,
        mc_remote,
        rel_tol=0.015,
        formula="network bytes / (S / k) against the Monte Carlo above",
    )
    r.claim(
        "DeepSeek-V3 routing: E[remote nodes] = E[distinct] (1 - 1/N) = Monte Carlo",
        closed * (1 - 1 / groups),
        mc_remote,
        rel_tol=0.015,
        unit="nodes",
        formula="the token's own node is any of the N alike",
    )


def _memory(r: Result) -> None:
    """Why DeepSeek-V3 cannot keep EP inside one node: the routed experts alone outgrow the GPUs."""
    shape = moe_shape("DeepSeek-V3")
    hbm = gpu(GPU).hbm_bytes
    for ep in (8, 64):
        per_gpu = shape.moe_layers * shape.experts / ep * SWIGLU_MATRICES * shape.hidden * shape.moe_ffn
        r.add(f"deepseek_expert_params_ep{ep}", per_gpu / 1e9, "billion parameters", f"routed experts per GPU, EP {ep}")
        r.add(f"deepseek_expert_bytes_ep{ep}", 2 * per_gpu, "B", f"the same in bf16 at EP {ep}")
    r.claim(
        "DeepSeek-V3 at EP 8: the bf16 routed experts alone exceed an H100's memory",
        r.quantities["deepseek_expert_bytes_ep8"].value,
        hbm,
        relation=">=",
        unit="B",
    )
