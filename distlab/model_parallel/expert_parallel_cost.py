"""Expert parallelism's all-to-all, timed: bytes and seconds per MoE layer inside a node and across nodes.

A mixture-of-experts layer on EP = e GPUs sends every token's hidden state to the GPUs holding its top-k experts
(dispatch) and the results back (combine); backward runs both in reverse. Per MoE layer and micro-batch, each GPU
therefore takes part in 4 all-to-alls of

    S = T * k * h * bytes_per_element          (T tokens per GPU, uniform routing, no capacity padding)

in nccl-tests' convention (all bytes one rank sends, its own share included). With uniform routing a share (e-1)/e of
S leaves the GPU; when the EP group spans nodes of g GPUs, (e-g)/e of it leaves the node, through the GPU's own NIC,
while (g-1)/e crosses NVLink. Both run at once, so one all-to-all takes

    t = (e - 1) * alpha + max(S (g-1)/e / B_nvlink, S (e-g)/e / B_nic)             (e > g)
    t = (e - 1) * alpha + S (e-1)/e / B_nvlink                                      (e <= g: inside the node)

DeepSeek-V3's routing sends a token to experts in at most `limited_groups` of its `expert_groups` groups; when the
groups are the nodes (DeepSeek-V3's report aligns them; here an assumption), a token crosses the network once per
remote node it needs and is forwarded over NVLink there, so the network bytes fall to E[remote nodes] x h per token
instead of k x (e-g)/e. `expected_nodes` gives E[distinct nodes] for uniform choices inside the chosen groups.

The expert compute the all-to-all could hide behind: each routed (and shared) expert is a SwiGLU MLP, 3 matrices of
h x f, 2 FLOPs per multiply-add, forward + backward = 3 x forward. Whether EP may leave the NVLink domain is then the
ratio of the two (`alltoall_over_compute`): above 1 the all-to-all cannot be hidden even with perfect overlap.

Pure Python (no torch): the planner imports `moe_alltoall_seconds` to time MoE layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from distlab.core.facts import entries, value
from distlab.hardware.links import Link, link, per_direction_bytes_per_s

ALLTOALLS_PER_LAYER = 4  # dispatch + combine in forward, and the same two in backward
SWIGLU_MATRICES = 3  # gate, up, down
FLOPS_PER_MAC = 2
FWD_BWD = 3  # backward = 2 x forward (input and weight gradients)


@dataclass(frozen=True, kw_only=True)
class MoEShape:
    """The MoE fields of moe_models.toml that set all-to-all bytes and expert FLOPs."""

    name: str
    layers: int
    hidden: int
    moe_ffn: int
    """One routed expert's intermediate width."""
    experts: int
    top_k: int
    shared_experts: int = 0
    dense_layers: int = 0
    """Leading layers with a dense MLP (no all-to-all)."""
    expert_groups: int = 0
    """Groups the router first chooses among (DeepSeek); 0 = no group limit."""
    limited_groups: int = 0
    """Groups a token may use (DeepSeek's n_limited_groups)."""

    def __post_init__(self) -> None:
        for f in ("layers", "hidden", "moe_ffn", "experts", "top_k"):
            if getattr(self, f) < 1:
                raise ValueError(f"{self.name}: {f} must be positive")
        if self.top_k > self.experts:
            raise ValueError(f"{self.name}: top_k {self.top_k} > experts {self.experts}")

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers


def moe_shape(name: str) -> MoEShape:
    """A model of moe_models.toml: "Mixtral-8x7B" or "DeepSeek-V3"."""
    data = entries("moe_models")
    if name not in data:
        raise ValueError(f"unknown MoE model {name!r}; known: {', '.join(data)}")
    row = data[name]
    keys = ("layers", "hidden", "moe_ffn", "experts", "top_k", "shared_experts", "dense_layers")
    extra = {k: row[k] for k in ("expert_groups", "limited_groups") if k in row}
    return MoEShape(name=row.get("name", name), **{k: row[k] for k in keys}, **extra)


def moe_params(name: str) -> tuple[float, float]:
    """(total, active per token) parameters of a moe_models.toml model, counted from its shape: attention (MLA's
    low-rank projections where the model has them, else GQA), dense and MoE MLPs (SwiGLU), router, norms, embeddings
    and an untied output head. DeepSeek-V3's multi-token-prediction module is not counted (its 671B does not)."""
    row = entries("moe_models")[name]
    h, layers, dense = row["hidden"], row["layers"], row["dense_layers"]
    heads = row["heads"]
    if "kv_lora_rank" in row:  # MLA (DeepSeek-V2/V3 model.py): q_a, q_b, kv_a (with the rope key), kv_b, o
        ql, kvl = row["q_lora_rank"], row["kv_lora_rank"]
        nope, rope, v = row["qk_nope_head_dim"], row["qk_rope_head_dim"], row["v_head_dim"]
        attn = h * ql + ql + ql * heads * (nope + rope) + h * (kvl + rope) + kvl + kvl * heads * (nope + v)
        attn += heads * v * h
    else:  # grouped-query attention: q and o are h x h, k and v h x kv_heads x head_dim
        head_dim = h // heads
        attn = 2 * h * h + 2 * h * row["kv_heads"] * head_dim
    norms = 2 * h
    mlp = SWIGLU_MATRICES * h
    routed = row["experts"] * mlp * row["moe_ffn"]
    shared = row["shared_experts"] * mlp * row["moe_ffn"]
    router = row["experts"] * h
    head = (1 if row.get("tie_embeddings") else 2) * row["vocab"] * h + h  # embeddings, head, final norm
    base = layers * (attn + norms) + dense * mlp * row["ffn"] + head
    moe_layers = layers - dense
    total = base + moe_layers * (routed + shared + router)
    active = base + moe_layers * (row["top_k"] * mlp * row["moe_ffn"] + shared + router)
    return float(total), float(active)


# ---------------------------------------------------------------- bytes
def dispatch_bytes(shape: MoEShape, tokens_per_gpu: int, bytes_per_element: int = 2) -> float:
    """S of one dispatch (or combine) all-to-all per GPU: T x k x h x bytes."""
    return tokens_per_gpu * shape.top_k * shape.hidden * bytes_per_element


def expected_nodes(k: int, groups_chosen: int, experts_per_group: int) -> float:
    """E[distinct groups holding a token's k experts], the k drawn uniformly without replacement from the
    groups_chosen x experts_per_group experts of its chosen groups: M (1 - C((M-1)G, k) / C(MG, k))."""
    m, g = groups_chosen, experts_per_group
    if k > m * g:
        raise ValueError(f"{k} experts cannot be drawn from {m} groups of {g}")
    return m * (1 - math.comb((m - 1) * g, k) / math.comb(m * g, k))


def remote_node_copies(shape: MoEShape, ep: int, gpus_per_node: int, node_limited: bool) -> float:
    """Copies of a token's hidden state that cross the network per dispatch: k x (e-g)/e with plain routing;
    with node-limited routing (groups = the EP group's nodes) the distinct nodes it needs, less its own: by symmetry
    its own node is any one of the N with equal chance, so E[remote] = E[distinct] (1 - 1/N)."""
    nodes = math.ceil(ep / gpus_per_node)
    if nodes == 1:
        return 0.0
    if not node_limited:
        return shape.top_k * (ep - gpus_per_node) / ep
    if not shape.limited_groups or shape.expert_groups != nodes:
        raise ValueError(f"{shape.name}: node-limited routing needs its {shape.expert_groups} groups = {nodes} nodes")
    per_group = shape.experts // shape.expert_groups
    return expected_nodes(shape.top_k, shape.limited_groups, per_group) * (1 - 1 / nodes)


# ---------------------------------------------------------------- seconds
def nvlink_effective() -> Link:
    """NVLink 4 at NCCL's effective rate (nccl-nvlink4), with NCCL's per-step latency."""
    nvl = link("NVLink4-H100")
    bw = value("interconnect.nccl-nvlink4.effective_gbytes_per_s") * 1e9
    return Link(name="NVLink 4 (NCCL effective)", bandwidth_bytes_per_s=bw, alpha_s=nvl.alpha_s, transport="nvlink")


def alltoall_seconds(
    shape: MoEShape,
    ep: int,
    tokens_per_gpu: int,
    *,
    gpus_per_node: int = 8,
    nic: str = "InfiniBand-NDR",
    node_limited: bool = False,
    bytes_per_element: int = 2,
) -> dict[str, float]:
    """One dispatch all-to-all on an EP group of `ep` GPUs (`gpus_per_node` of them per node, one NIC each)."""
    if isinstance(ep, bool) or not isinstance(ep, int) or ep < 1:
        raise ValueError(f"ep must be a positive integer, got {ep!r}")
    if shape.experts % ep:
        raise ValueError(f"{shape.name}: {shape.experts} experts do not split over EP = {ep}")
    if ep > gpus_per_node and ep % gpus_per_node:
        raise ValueError(f"EP = {ep} across nodes must fill whole nodes of {gpus_per_node} GPUs")
    s = dispatch_bytes(shape, tokens_per_gpu, bytes_per_element)
    nvl = nvlink_effective()
    if ep == 1:
        return {"bytes": s, "nvlink_bytes": 0.0, "network_bytes": 0.0, "seconds": 0.0}
    if ep <= gpus_per_node:
        nv_bytes, net_bytes = s * (ep - 1) / ep, 0.0
        seconds = (ep - 1) * nvl.alpha_s + nv_bytes / nvl.bandwidth_bytes_per_s
    else:
        ib = link(nic)
        copies = remote_node_copies(shape, ep, gpus_per_node, node_limited)
        net_bytes = s / shape.top_k * copies
        nv_bytes = s * (gpus_per_node - 1) / ep
        if node_limited:  # what arrives over the network is forwarded to the right GPUs over NVLink
            nv_bytes += s * (ep - gpus_per_node) / ep
        seconds = (ep - 1) * ib.alpha_s + max(
            nv_bytes / nvl.bandwidth_bytes_per_s, net_bytes / per_direction_bytes_per_s(nic)
        )
    return {"bytes": s, "nvlink_bytes": nv_bytes, "network_bytes": net_bytes, "seconds": seconds}


def expert_flops_per_token(shape: MoEShape) -> float:
    """Forward + backward FLOPs of one MoE layer's experts for one token: (k + shared) SwiGLU MLPs."""
    per_expert = SWIGLU_MATRICES * FLOPS_PER_MAC * shape.hidden * shape.moe_ffn
    return FWD_BWD * (shape.top_k + shape.shared_experts) * per_expert


def moe_alltoall_seconds(
    shape: MoEShape,
    ep: int,
    tokens_per_gpu: int,
    *,
    gpus_per_node: int = 8,
    nic: str = "InfiniBand-NDR",
    node_limited: bool = False,
) -> float:
    """Seconds of all-to-all per micro-batch for the whole model (4 per MoE layer): what the planner adds."""
    one = alltoall_seconds(shape, ep, tokens_per_gpu, gpus_per_node=gpus_per_node, nic=nic, node_limited=node_limited)[
        "seconds"
    ]
    return ALLTOALLS_PER_LAYER * shape.moe_layers * one


def alltoall_over_compute(
    shape: MoEShape,
    ep: int,
    tokens_per_gpu: int,
    *,
    peak_flops: float,
    mfu: float,
    gpus_per_node: int = 8,
    nic: str = "InfiniBand-NDR",
    node_limited: bool = False,
) -> float:
    """All-to-all time over the expert compute of the same layer: above 1, EP at this size cannot be hidden."""
    if not (0 < mfu <= 1) or not peak_flops > 0:
        raise ValueError("peak_flops must be positive and mfu in (0, 1]")
    t = alltoall_seconds(shape, ep, tokens_per_gpu, gpus_per_node=gpus_per_node, nic=nic, node_limited=node_limited)
    compute = tokens_per_gpu * expert_flops_per_token(shape) / (peak_flops * mfu)
    return ALLTOALLS_PER_LAYER * t["seconds"] / compute


def break_even_ffn(
    ep: int,
    *,
    peak_flops: float,
    mfu: float,
    gpus_per_node: int = 8,
    nic: str = "InfiniBand-NDR",
    bytes_per_element: int = 2,
) -> float:
    """The expert width f below which a cross-node EP all-to-all outlasts the expert compute (shared experts and the
    latency term left out). Per token and layer the network carries 4 x k h b x (e-g)/e bytes and the experts do
    3 x k x 3 x 2 h f FLOPs, so k and h cancel:

        f* = 4 b (e-g)/e x peak x MFU / (18 B_nic)
    """
    if ep <= gpus_per_node:
        return 0.0
    remote = (ep - gpus_per_node) / ep
    flops_per_f = FWD_BWD * SWIGLU_MATRICES * FLOPS_PER_MAC  # per token, expert, hidden unit and unit of f
    network_bytes_per_f = ALLTOALLS_PER_LAYER * bytes_per_element * remote / per_direction_bytes_per_s(nic)
    return network_bytes_per_f * peak_flops * mfu / flops_per_f
