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
import re

from distlab.core.facts import quoted, value
from distlab.core.results import Result, worst_relative_gap
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
        "ffn": "inter_dim",
        "heads": "n_heads",
        "vocab": "vocab_size",
        "q_lora_rank": "q_lora_rank",
        "kv_lora_rank": "kv_lora_rank",
        "qk_nope_head_dim": "qk_nope_head_dim",
        "qk_rope_head_dim": "qk_rope_head_dim",
        "v_head_dim": "v_head_dim",
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


def deepseek_v3_params() -> tuple[int, int]:
    """(total, active) parameters of DeepSeek-V3 without its MTP module, module by module as inference/model.py
    builds them (MLA's wq_a, q_norm, wq_b, wkv_a, kv_norm, wkv_b, wo; the Gate's weight; Expert's w1, w2, w3), from
    the config's printed numbers. The Gate's 256-entry bias is left out, as distlab's count leaves it out."""
    c = config("DeepSeek-V3")
    h, heads, ql, kvl = c["hidden"], c["heads"], c["q_lora_rank"], c["kv_lora_rank"]
    nope, rope, v = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    wq_a, q_norm, wq_b = h * ql, ql, ql * heads * (nope + rope)
    wkv_a, kv_norm, wkv_b = h * (kvl + rope), kvl, kvl * heads * (nope + v)
    wo = heads * v * h
    attention = wq_a + q_norm + wq_b + wkv_a + kv_norm + wkv_b + wo
    layer_norms = 2 * h  # attn_norm, ffn_norm
    expert = 3 * h * c["moe_ffn"]  # w1, w2, w3
    gate = c["experts"] * h
    moe_layers = c["layers"] - c["dense_layers"]
    shared = c["shared_experts"] * expert
    outer = c["vocab"] * h + h + h * c["vocab"]  # embed, final norm, head (untied)
    common = c["layers"] * (attention + layer_norms) + c["dense_layers"] * 3 * h * c["ffn"] + outer
    total = common + moe_layers * (c["experts"] * expert + shared + gate)
    active = common + moe_layers * (c["top_k"] * expert + shared + gate)
    return total, active


def expected_nodes(k: int, groups: int, per_group: int) -> float:
    """E[distinct groups a token's k experts fall in], drawn without replacement from `groups` x `per_group`:
    each group is missed with probability prod_{i<k} ((groups-1) per_group - i) / (groups per_group - i)."""
    missed = 1.0
    for i in range(k):
        missed *= ((groups - 1) * per_group - i) / (groups * per_group - i)
    return groups * (1 - missed)


def shares(c: dict[str, int], ep: int, per_node: int, limited: bool, tokens: int) -> tuple[float, float, float]:
    """(S, bytes over NVLink, bytes through the NIC) of one dispatch all-to-all per GPU: each GPU sends S = T k h 2
    bytes, (g-1)/e of it over NVLink and (e-g)/e of it to other nodes through its own NIC; node-limited routing sends
    a token once per remote node it needs and forwards it over NVLink there."""
    s = tokens * c["top_k"] * c["hidden"] * BF16
    if ep <= per_node:
        return s, s * (ep - 1) / ep, 0.0
    if limited:
        nodes = ep // per_node
        remote = expected_nodes(c["top_k"], c["limited_groups"], c["experts"] // c["expert_groups"]) * (1 - 1 / nodes)
        return s, s * (per_node - 1) / ep + s * (ep - per_node) / ep, s / c["top_k"] * remote
    return s, s * (per_node - 1) / ep, s * (ep - per_node) / ep


def alltoall_s(c: dict[str, int], ep: int, per_node: int, limited: bool, tokens: int) -> float:
    """One dispatch all-to-all: (e-1) latency steps, then the NVLink and NIC shares at once, the slower one counts."""
    _, over_nvlink, network = shares(c, ep, per_node, limited, tokens)
    nvlink = value("interconnect.nccl-nvlink4.effective_gbytes_per_s") * 1e9  # NCCL's measured NVLink 4 rate
    if ep <= per_node:
        return (ep - 1) * alpha_s("nvlink") + over_nvlink / nvlink
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
    r.claim(
        "DeepSeek-V3: EP 64 over 8 nodes / EP 8 in one node, all-to-all time = the hand-worked times' ratio",
        q.get("across_over_inside", math.nan),
        alltoall_s(ds, 64, 8, False, tokens) / alltoall_s(ds, 8, 8, False, tokens),
        rel_tol=1e-9,
    )
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
    readme = {  # the README's own words, quoted in its source's detail
        "params_published_billion": r"(\d+)B total parameters",
        "active_params_published_billion": r"(\d+)B activated per token",
        "mtp_params_published_billion": r"MTP module \((\d+)B parameters",
    }
    for field, pattern in readme.items():
        path = f"moe_models.DeepSeek-V3.{field}"
        gaps.append(abs(value(path) - quoted(path, pattern)))
    r.claim(
        "moe_models.toml's typed fields = the numbers the configs and DeepSeek-V3's README print "
        "(config_671B.json, MixtralConfig, README_WEIGHTS.md): largest difference",
        max(gaps),
        0,
        abs_tol=0,
    )
    total, _ = deepseek_v3_params()
    r.claim(
        "DeepSeek-V3 counted = its modules' parameters summed by hand from the config (inference/model.py's shapes)",
        q.get("deepseek_params", math.nan) * 1e9,
        total,
        rel_tol=1e-12,
        unit="params",
    )
    _routing(r, q)
    _table(r, layouts, mfu, tokens)
    r.claim(
        "Mixtral 8x7B counted from its shape = the parameters its released checkpoint stores (safetensors total)",
        q.get("mixtral_params", math.nan) * 1e9,
        value("moe_models.Mixtral-8x7B.params_published"),
        rel_tol=1e-12,
        unit="params",
    )


def _routing(r: Result, q: dict[str, float]) -> None:
    """The routing numbers the appendix prints: distinct and remote nodes a DeepSeek-V3 token needs (the product
    form above), and the plain-routing copies = the plain EP 64 row's network bytes over one token copy."""
    c = config("DeepSeek-V3")
    nodes = c["expert_groups"]  # the EP 64 layout's 8 nodes, one group each
    distinct = expected_nodes(c["top_k"], c["limited_groups"], c["experts"] // c["expert_groups"])
    copy = q["tokens_per_gpu"] * c["hidden"] * BF16  # one copy of every token's hidden state
    pairs = [
        (q.get("deepseek_distinct_nodes", math.nan), distinct),
        (q.get("deepseek_remote_nodes", math.nan), distinct * (nodes - 1) / nodes),
        (q.get("deepseek_plain_copies", math.nan), q.get("deepseek_ep64_g8_network_bytes", math.nan) / copy),
        (q.get("deepseek_ep64_g8_limited_copies", math.nan), distinct * (nodes - 1) / nodes),
    ]
    r.claim(
        "DeepSeek-V3 routing: distinct and remote nodes per token and network copies = the product of draws by hand "
        "and the plain EP 64 row's bytes: worst relative gap",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-9,
    )


LABEL = re.compile(r"EP (\d+) (?:in one node|over (\d+) nodes(?: \((\d+) GPUs? each\))?)(, node-limited routing)?$")


def _label_says(label: str) -> tuple[int, int, int, bool]:
    """(EP, nodes, GPUs of the group per node, node-limited) as a row's words state them; a node's GPUs are not
    repeated when the group fills whole nodes of 8."""
    m = LABEL.match(label)
    if m is None:
        return (0, 0, 0, False)
    ep, nodes = int(m[1]), int(m[2] or 1)
    per_node = int(m[3]) if m[3] else (8 if m[2] else ep)
    return ep, nodes, per_node, bool(m[4])


def _table(r: Result, layouts: dict[str, tuple[str, int, int, bool]], mfu: float, tokens: int) -> None:
    """Every cell of the all-to-all table against the hand-worked layout: its label's EP, nodes and GPUs per node,
    S, the NVLink and NIC shares, 4 all-to-alls, the expert compute, the ratio and the verdict; the caption's MFU."""
    table = r.tables["alltoall"]
    pairs, wrong = [], []
    for row, (model, ep, per_node, limited) in zip(table.rows, layouts.values(), strict=True):
        c = config(model)
        nodes = 1 if ep <= per_node else ep // per_node
        if _label_says(row[1]) != (ep, nodes, per_node if nodes > 1 else ep, limited):
            wrong.append(row[1])
        s, nvlink, network = shares(c, ep, per_node, limited, tokens)
        layer = 4 * alltoall_s(c, ep, per_node, limited, tokens)
        compute = expert_compute_s(c, tokens, mfu)
        pairs += [(row[2].value, s), (row[3].value, nvlink), (row[4].value, network)]
        pairs += [(row[5].value, layer), (row[6].value, compute), (float(row[7]), round(layer / compute, 2))]
        if ("exposed" in row[8]) != (layer > compute):
            wrong.append(row[8])
    mfu_said = re.search(r"at (\d+) % MFU", table.caption)
    pairs.append((float(mfu_said[1]) if mfu_said else math.nan, 100 * mfu))
    r.claim(
        "the all-to-all table's cells (S, NVLink and NIC bytes, 4 all-to-alls, expert compute, ratio, caption MFU) "
        "= the hand-worked layouts: worst relative gap",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-9,
    )
    r.claim("the table's labels and verdicts that disagree with their layout's numbers", len(wrong), 0)
