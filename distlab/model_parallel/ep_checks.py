"""Expert parallelism's numbers (chapter 9, appendix 07) worked by hand: each layout's all-to-all over expert compute,
the routed experts' bytes per GPU and the configs' fields, from a second route.

The shapes come from the numbers the configs print, as quoted in moe_models.toml's source details (DeepSeek-V3's
config_671B.json, transformers' MixtralConfig defaults), not from the typed fields the experiment reads; the network
port from the QM9700 manual (distlab.sharding.zero_checks); the expected nodes a token needs as a product of draws
without replacement, not the binomial-coefficient form of distlab.model_parallel.expert_parallel_cost. Nothing here
calls that module.
"""

from __future__ import annotations

import math

from distlab.core.facts import quoted, value
from distlab.core.results import Result
from distlab.interconnect.placement_checks import alpha_s
from distlab.sharding.zero_checks import ndr_bytes_per_s

BF16 = 2  # bytes per activation and per weight
# (typed field, the config's own name as the quote prints it: `name value` or `name: int = value`)
CONFIG_NAMES = {
    "DeepSeek-V3": {
        "layers": "n_layers",
        "hidden": "dim",
        "moe_ffn": "moe_inter_dim",
        "experts": "n_routed_experts",
        "shared_experts": "n_shared_experts",
        "top_k": "n_activated_experts",
        "dense_layers": "n_dense_layers",
        "expert_groups": "n_expert_groups",
        "limited_groups": "n_limited_groups",
    },
    "Mixtral-8x7B": {
        "layers": "num_hidden_layers",
        "hidden": "hidden_size",
        "moe_ffn": "intermediate_size",
        "experts": "num_local_experts",
        "top_k": "num_experts_per_tok",
    },
}


def config(model: str) -> dict[str, int]:
    """A model's MoE fields as its config prints them (the quote in its source's detail). Mixtral has no shared
    experts and no dense layers (every layer is MoE: the config has no field for either)."""
    out = {"shared_experts": 0, "dense_layers": 0}
    for field, name in CONFIG_NAMES[model].items():
        out[field] = int(quoted(f"moe_models.{model}.{field}", rf"\b{name}(?::\s*int\s*=)?\s+(\d+)"))
    return out


def expected_nodes(k: int, groups: int, per_group: int) -> float:
    """E[distinct groups a token's k experts fall in], drawn without replacement from `groups` x `per_group`:
    each group is missed with probability prod_{i<k} ((groups-1) per_group - i) / (groups per_group - i)."""
    missed = 1.0
    for i in range(k):
        missed *= ((groups - 1) * per_group - i) / (groups * per_group - i)
    return groups * (1 - missed)


def alltoall_s(c: dict[str, int], ep: int, per_node: int, limited: bool, tokens: int) -> float:
    """One dispatch all-to-all: each GPU sends S = T k h 2 bytes, (g-1)/e of it over NVLink, (e-g)/e of it to other
    nodes through its own NIC, both at once; node-limited routing sends a token once per remote node it needs and
    forwards it over NVLink there."""
    s = tokens * c["top_k"] * c["hidden"] * BF16
    nvlink = value("interconnect.nccl-nvlink4.effective_gbytes_per_s") * 1e9  # NCCL's measured NVLink 4 rate
    if ep <= per_node:
        return (ep - 1) * alpha_s("nvlink") + s * (ep - 1) / ep / nvlink
    nodes = ep // per_node
    if limited:
        remote = expected_nodes(c["top_k"], c["limited_groups"], c["experts"] // c["expert_groups"]) * (1 - 1 / nodes)
        network = s / c["top_k"] * remote
        over_nvlink = s * (per_node - 1) / ep + s * (ep - per_node) / ep
    else:
        network = s * (ep - per_node) / ep
        over_nvlink = s * (per_node - 1) / ep
    return (ep - 1) * alpha_s("net") + max(over_nvlink / nvlink, network / ndr_bytes_per_s())


def expert_compute_s(c: dict[str, int], tokens: int, mfu: float) -> float:
    """The layer's experts for T tokens: (k + shared) SwiGLU MLPs of 3 h x f matrices, 2 FLOPs per multiply-add,
    forward and backward 3 x forward, at the H100's dense bf16 peak x MFU."""
    flops = tokens * 3 * (c["top_k"] + c["shared_experts"]) * 3 * 2 * c["hidden"] * c["moe_ffn"]
    return flops / (value("gpus.H100-SXM.bf16_dense_tflops") * 1e12 * mfu)


def check(r: Result, layouts: dict[str, tuple[str, int, int, bool]], mfu: float) -> None:
    """ep-alltoall's ratios, expert bytes and shapes against the references above, as claims."""
    q = {k: v.value for k, v in r.quantities.items()}
    tokens = int(q["tokens_per_gpu"])
    gaps = []
    for key, (model, ep, per_node, limited) in layouts.items():
        c = config(model)
        want = 4 * alltoall_s(c, ep, per_node, limited, tokens) / expert_compute_s(c, tokens, mfu)
        gaps.append(abs(q.get(f"{key}_ratio", math.nan) / want - 1))
    worst = math.inf if any(math.isnan(g) for g in gaps) else max(gaps)  # a missing ratio fails, never passes
    r.claim(
        "every layout's all-to-all / expert compute = a hand-worked alpha-beta time over the experts' FLOPs "
        "(configs as printed, NDR from the QM9700 manual): worst relative gap",
        worst,
        0.0,
        abs_tol=1e-9,
        formula="4 [(e-1) α + max(NVLink share / B_NVLink, NIC share / B_NIC)] / (T 3 (k+s) 3 2 h f / (peak MFU))",
    )
    ds = config("DeepSeek-V3")
    routed_ep8 = (ds["layers"] - ds["dense_layers"]) * ds["experts"] // 8 * 3 * ds["hidden"] * ds["moe_ffn"] * BF16
    r.claim(
        "DeepSeek-V3 at EP 8: the routed experts' bf16 bytes per GPU = 58 MoE layers x 32 experts x 3 x 7168 x 2048 "
        "x 2 B, from the config",
        q.get("deepseek_expert_bytes_ep8", math.nan),
        routed_ep8,
        rel_tol=1e-12,
        unit="B",
    )
    gaps = [
        abs(value(f"moe_models.{model}.{field}") - printed)
        for model in CONFIG_NAMES
        for field, printed in config(model).items()
        if field in CONFIG_NAMES[model]
    ]
    r.claim(
        "moe_models.toml's typed fields = the numbers the configs print (DeepSeek-V3's config_671B.json, "
        "MixtralConfig): largest difference",
        max(gaps),
        0,
        abs_tol=0,
    )
    r.claim(
        "Mixtral 8x7B counted from its shape = the parameters its released checkpoint stores (safetensors total)",
        q.get("mixtral_params", math.nan) * 1e9,
        value("moe_models.Mixtral-8x7B.params_published"),
        rel_tol=1e-12,
        unit="params",
    )
