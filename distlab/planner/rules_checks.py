"""Chapter 7's closed forms (experiment parallel-rules) worked a second way: TP's all-reduce time and ZeRO-3's
hiding point counted as times of a concrete layer and replica, not by the simplified ratios distlab.planner.rules
returns; the sustained matmul rate, the link rates and the budget from the numbers their sources print (the MSMF
table, the InfiniBand and Ethernet standards, nvidia-smi's total, the CUDA context); Llama 2 70B's shape from its
config.json (worked_plan_checks.CONFIGS); 1F1B's first-stage activations from Korthikanti et al.'s bytes per layer
(worked_plan_checks.plan_memory), and so every plan the page shows or compares, CP and Mixtral's experts included,
whose picks are searched again with each candidate sized by hand; the global batch from Llama 2's printed 4M tokens.

The plans the search picks come from the cost model (chapter 13 judges it against published runs); here the shares
and slowdowns the page prints are re-derived from the compared plans' causes, each step the sum of its causes.
"""

from __future__ import annotations

import math
import re

from distlab.core.facts import quoted, value
from distlab.core.results import Result, worst_relative_gap
from distlab.interconnect.placement_checks import H100_NODE, LINK_QUOTES
from distlab.models.shapes import preset
from distlab.planner.config import FRAGMENTATION_FRACTION, Plan
from distlab.planner.cost_checks import check_step_causes
from distlab.planner.kernels_checks import a100_flops_by_source, sustained_flops_by_source
from distlab.planner.memory_quotes import quoted as memory_quoted
from distlab.planner.planner_checks import read_label, share_of_step
from distlab.planner.rules import MIN_HEADROOM
from distlab.planner.worked_plan_checks import CONFIGS, budget, model_params, plan_memory

SEQ_70B = 4096  # Llama 2's training context (its paper's Table 1)
LLAMA2_BATCH_TOKENS = 4 * 2**20  # Llama 2's paper, Table 1: "4M" tokens per step, Meta's usual 2^22


def port_bytes_per_s(link: str) -> float:
    """A network port's rate per direction, from the standard's sentence, in bytes/s."""
    field = f"{link}.gbits_per_s_per_direction"
    return quoted(f"interconnect.{field}", LINK_QUOTES[field]) * 1e9 / 8


def tp_overhead_by_times(tp: int, hidden: int, flops: float, bus: float, tokens: int = SEQ_70B) -> float:
    """A Llama-shaped layer of 12h^2 parameters under TP `tp`, `tokens` tokens: its all-reduce seconds (forward and
    backward each all-reduce the layer's tokens x h bf16 activations twice, a ring moving 2(t-1)/t of them) over
    its matmul seconds (6 FLOPs per parameter per token, forward 2 and backward 4, split over t GPUs)."""
    comm_s = 4 * (2 * (tp - 1) / tp) * tokens * hidden * 2 / bus
    matmul_s = 6 * 12 * hidden**2 * tokens / tp / flops
    return comm_s / matmul_s


def zero3_hiding_tokens_by_times(flops: float, bus: float, params: int = 10**9) -> float:
    """Tokens per replica per step at which ZeRO-3's traffic (all-gather forward and backward, reduce-scatter: 3 x 2
    bytes per parameter) takes as long as the replica's 6 FLOPs per parameter per token: solved for tokens."""
    traffic_s = 3 * 2 * params / bus
    return traffic_s * flops / (6 * params)


def check_closed_forms(r: Result, nvlink_bus: float) -> None:
    """Every closed-form number chapter 7 prints from parallel-rules, each against its second derivation.
    `nvlink_bus`: NCCL's bus bandwidth on NVLink 4, fitted to nccl-tests (chapter 9 claims the fit)."""
    q = {k: v.value for k, v in r.quantities.items()}
    h = CONFIGS["70B"]["hidden"]
    flops = sustained_flops_by_source()
    ib = port_bytes_per_s("InfiniBand-NDR")
    r.claim("sustained matmul rate = the H200's measured MSMF as its source prints it", q["sustained_flops"], flops)
    for tp, bus, key in ((8, nvlink_bus, "tp8_nvlink"), (16, ib, "tp16_ib"), (2, ib, "tp2_ib")):
        r.claim(
            f"70B, TP {tp}: all-reduce time over matmul time, counted for one layer (h = {h} from config.json)",
            q[f"70b_{key}_overhead"],
            tp_overhead_by_times(tp, h, flops, bus),
            rel_tol=1e-9,
        )
    r.claim(
        "ZeRO-3 hides from this many tokens per replica (H100, NDR): traffic time = compute time, solved",
        q["zero3_hidden_tokens"],
        zero3_hiding_tokens_by_times(flops, ib),
        rel_tol=1e-9,
        unit="tokens",
    )
    # the A100 has no published sustained rate: its burst MAMF stands in (distlab.planner.kernels), as its source
    # prints it; the link is the standard's and the hiding point is counted as times
    r.claim(
        "ZeRO-3 hides from this many tokens per replica (A100, 100 GbE): traffic time = compute time, solved",
        q["zero3_hidden_tokens_ethernet"],
        zero3_hiding_tokens_by_times(a100_flops_by_source(), port_bytes_per_s("Ethernet-100G")),
        rel_tol=1e-9,
        unit="tokens",
    )
    r.claim("the global batch = Llama 2's printed 4M tokens", q["global_batch_tokens"], LLAMA2_BATCH_TOKENS)
    r.claim(
        "tokens per replica at 1024 replicas = 4M / 1024, by hand", q["tokens_per_replica_1024"], 4096, unit="tokens"
    )
    capacity = memory_quoted("planner.capacity-H100-SXM.reported_mib") * 2**20
    context = memory_quoted("planner.memory-reserve.cuda_context_mib") * 2**20
    r.claim(
        "usable H100 bytes = nvidia-smi's total less the fragmentation margin and the CUDA context",
        q["usable_h100"],
        capacity * (1 - FRAGMENTATION_FRACTION) - context,
        rel_tol=1e-12,
        unit="B",
    )
    stage0 = plan_memory(Plan(tp=8, pp=8, dp=1, microbatches=128), SEQ_70B, "70B")["activations"]
    r.claim(
        "70B, TP 8, PP 8: stage 0's activations = 10 layers x 8 in flight x Korthikanti's bytes, by hand",
        q["70b_stage0_activations"],
        stage0,
        rel_tol=1e-12,
        unit="B",
    )


SLOWDOWNS = {  # shown quantity: (the slower plan, the faster plan), as r.data["compared"] names them
    "long_no_cp_slowdown": ("long_no_cp", "long_best"),
    "moe_inside_slowdown": ("moe_inside", "moe_best"),
    "moe_cross_node_slowdown": ("moe_cross_node", "moe_best"),
    "cp_cut_cost": ("cp_cut_rules", "cp_cut_free"),
}
A2A_SHARES = {"moe_a2a_share": "moe_best", "moe_inside_a2a": "moe_inside", "moe_cross_node_a2a": "moe_cross_node"}


def check_search_figures(r: Result) -> None:
    """The shares and slowdowns chapter 7 prints between plans the search found: each step taken as the sum of its
    causes, a slowdown as the extra seconds over the faster plan's."""
    compared = r.data["compared"]
    step = {k: math.fsum(b.values()) for k, b in compared.items()}
    for shown, (slow, fast) in SLOWDOWNS.items():
        if shown in r.quantities:
            r.claim(
                f"{shown}: ({slow}'s step - {fast}'s) / {fast}'s, each the sum of its causes",
                r.quantities[shown].value,
                (step[slow] - step[fast]) / step[fast],
                rel_tol=1e-9,
            )
    for shown, plan in A2A_SHARES.items():
        if shown in r.quantities:
            r.claim(
                f"{shown}: {plan}'s exposed all-to-alls over the sum of its causes",
                r.quantities[shown].value,
                share_of_step(compared[plan], "exposed_cp_ep"),
                rel_tol=1e-9,
            )


def _label_counts(label: str) -> tuple[int, int]:
    """(nodes, GPUs) a cluster's label prints: "8 nodes, 64 H100, ..." or "4 GB200 NVL72 racks, 16 trays each, 256
    GPUs" (a tray is a node of the NVLink domain)."""
    racks = re.match(r"(\d+) GB200 NVL72 racks, (\d+) trays each, (\d+) GPUs", label)
    if racks:
        return int(racks[1]) * int(racks[2]), int(racks[3])
    found = re.match(r"(\d+) nodes?, (\d+) (?:H100|A100)", label)
    if found is None:
        raise ValueError(f"cluster label {label!r} prints no node and GPU counts")
    return int(found[1]), int(found[2])


def check_labels(r: Result, clusters: dict, rules_cluster: str) -> None:
    """What the labels print against what was priced: each cluster's nodes and GPUs; the rules table's pipeline
    rows, whose largest stage count is the GPUs over TP (every power of two up to it tiles them and is under the
    layer count); the long request's plan without CP has none; the MoE plan said to leave the node exists, its TP x
    EP is over the node's GPUs and its EP as shown."""
    for label, c in clusters.items():
        nodes, gpus = _label_counts(label)
        r.claim(f"cluster {label!r}: nodes as its label prints", c.nodes, nodes)
        r.claim(f"cluster {label!r}: GPUs as its label prints", c.gpus, gpus)
    _, gpus = _label_counts(rules_cluster)
    for name, verdict, _why in r.tables["rules"].rows:
        at = re.fullmatch(r"pipeline at TP (\d+)", str(name))
        if at and verdict != "1":
            r.claim(f"rules table, {name}: up to GPUs / TP stages", int(str(verdict).split()[-1]), gpus // int(at[1]))
    no_cp = r.data["long_no_cp_label"]
    r.claim(f"the long request's best plan without CP ({no_cp}): its label has no CP", " CP " in no_cp, False)
    label = r.data.get("moe_cross_node_label", "")
    r.claim("MoE: a ranked plan whose EP group leaves the node exists (TP 2 x EP 8 on 64 GPUs fits)", bool(label), True)
    if label:
        tp, ep = (int(re.search(rf"{k} (\d+)", label)[1]) for k in ("TP", "EP"))  # type: ignore[index]
        r.claim(
            "MoE plan said to leave the node: its EP as its label prints", r.quantities["moe_cross_node_ep"].value, ep
        )
        r.claim(
            f"MoE plan said to leave the node: TP x EP ({label}) > a DGX H100's {H100_NODE} GPUs",
            tp * ep,
            H100_NODE + 1,
            relation=">=",
        )


def _row_model(cell: str) -> tuple[str, int] | None:
    """(hand config, sequence) of a plans-table row as its model cell prints them: a dense model at its training
    sequence, "70B, 131,072-token sequences", "Mixtral 8x7B, ..." at its 32,768-token context."""
    if cell in CONFIGS:
        return cell, preset(cell).seq
    long = re.fullmatch(r"(\w+), ([\d,]+)-token sequences", cell)
    if long and long[1] in CONFIGS:
        return long[1], int(long[2].replace(",", ""))
    if cell.startswith("Mixtral 8x7B,"):
        return "Mixtral-8x7B", CONFIGS["Mixtral-8x7B"]["seq"]
    return None


def check_plan_memory(r: Result) -> None:
    """The plans table's memory per GPU, row by row, against the plan its label names sized by hand from the model's
    config.json (worked_plan_checks.plan_memory) at the row's sequence, the context- and expert-parallel rows too."""
    pairs, unread = [], 0
    for cell, _cluster, label, memory, *_ in r.tables["plans"].rows:
        model = _row_model(cell)
        if model is None or label == "does not fit":
            unread += model is None
            continue
        plan = read_label(label)
        if plan is None:
            unread += 1
            continue
        pairs.append((memory.value, plan_memory(plan, model[1], model[0])["device"]))
    r.claim("plans table: plan labels or model cells that do not read back", unread, 0)
    r.claim(
        f"plans table: memory per GPU of the {len(pairs)} plans = each label's plan sized by hand: worst gap",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-9,
        formula="16 B/param by ZeRO stage over dp x cp (experts over dp x cp / ep); per layer "
        "(12h + 4kv + 8f + 8 + 4a) sb/t (Llama; Mixtral with f = 2 x 14336), (32h + 16 + 4a) sb/t (GPT-3)",
    )


def check_compared_memory(r: Result) -> None:
    """Every plan the page compares beside the table (the long request's without CP, the rules table's without
    rules, the MoE plans inside and across nodes): its memory sized by hand, leaving the headroom rule's share of the
    H100's usable bytes free by hand, its fit margin; and the hand Mixtral config against the released checkpoint's
    parameter count."""
    requests = {
        "long": ("70B", int(r.quantities["long_seq"].value)),
        "cp_cut": ("70B", SEQ_70B),
        "moe": ("Mixtral-8x7B", CONFIGS["Mixtral-8x7B"]["seq"]),
    }
    usable = budget("H100-SXM")
    compared, over = [], []
    for key, shown in r.data["compared_plans"].items():
        model, seq = next(v for k, v in requests.items() if key.startswith(k))
        plan = read_label(shown["label"])
        hand = plan_memory(plan, seq, model)["device"] if plan else math.inf
        compared.append((shown["memory"], hand))
        over += [f"{key}: {shown['label']}"] if hand > (1 - MIN_HEADROOM) * usable else []
    r.claim(
        f"the {len(compared)} compared plans' memory = each sized by hand: worst gap",
        worst_relative_gap(compared),
        0.0,
        abs_tol=1e-9,
    )
    r.claim(
        f"compared plans with less than {MIN_HEADROOM:.0%} of {usable / 2**30:.1f} GiB free, by hand",
        len(over),
        0,
        formula="over: " + ("; ".join(over) or "none"),
    )
    # the fit test: the memory plus the allocator's fragmentation and the CUDA context within nvidia-smi's total
    beyond = [(shown["beyond"], h100_capacity() - usable) for shown in r.data["compared_plans"].values()]
    beyond += [(shown["usable"], usable) for shown in r.data["compared_plans"].values()]
    r.claim(
        "compared plans' fit margin and usable bytes = nvidia-smi's total less the hand budget: worst gap",
        worst_relative_gap(beyond),
        0.0,
        abs_tol=1e-9,
    )
    r.claim(
        "Mixtral 8x7B's parameters by hand = its checkpoint's safetensors total",
        model_params("Mixtral-8x7B", 0),
        value("moe_models.Mixtral-8x7B.params_published"),
    )


def h100_capacity() -> float:
    """An H100 SXM's bytes as nvidia-smi prints its total (MiB), in its source's sentence."""
    return memory_quoted("planner.capacity-H100-SXM.reported_mib") * 2**20


def hand_sizer():
    """A sizer for search (its `sizer`): each plan's bytes by hand (worked_plan_checks.plan_memory, the model named
    by its config, the request's sequence) as a MemoryBreakdown whose peak, NCCL buffers and host bytes are the hand
    figures, with the fragmentation and the CUDA context from nvidia-smi's total and the hand budget."""
    from distlab.planner.memory import MemoryBreakdown

    context = memory_quoted("planner.memory-reserve.cuda_context_mib") * 2**20
    fragmentation = h100_capacity() - budget("H100-SXM") - context
    configs = {preset(k).name: k for k in ("7B", "13B", "70B", "175B")} | {"Mixtral 8x7B": "Mixtral-8x7B"}

    def size(m, _c, t, plan: Plan) -> MemoryBreakdown:
        hand = plan_memory(plan, t.seq, configs[m.name])
        zero = dict.fromkeys(("gradients", "optimizer", "activations", "logits", "gather_buffers"), 0.0)
        return MemoryBreakdown(
            weights=hand["peak"],
            comm_buffers=hand["device"] - hand["peak"],
            host=hand["host"],
            context=context,
            fragmentation=fragmentation,
            **zero,
        )

    return size


def check_picks(r: Result, picks, clusters: dict) -> None:
    """Which plans the page shows and compares depends on which plans fit: searched again with every plan sized by
    hand (the model's step times, the hand's bytes), the same plans come out: the compared ones (`picks`, the
    experiment's searches) and the plans table's best on the H100 clusters (the hand budget is the H100's)."""
    from distlab.planner.config import Training
    from distlab.planner.search import PRETRAIN_BATCH_TOKENS, search

    sizer = hand_sizer()
    again = {k: e.plan.label() for k, e in picks(sizer=sizer).items()}
    shown = {k: v["label"] for k, v in r.data["compared_plans"].items()}
    for model, label, plan, *_ in r.tables["plans"].rows:
        c = clusters.get(label)
        if model in CONFIGS and c is not None and c.gpu.name.startswith("H100") and plan != "does not fit":
            m = preset(model)
            t = Training(global_batch_tokens=PRETRAIN_BATCH_TOKENS, seq=m.seq)  # the table's pretraining request
            shown[f"{model} / {label}"] = plan
            again[f"{model} / {label}"] = search(m, c, t, sizer=sizer)[0].plan.label()
    differ = sorted(k for k in shown.keys() | again.keys() if shown.get(k) != again.get(k))
    r.claim(
        f"the {len(shown)} shown plans, searched again with each candidate sized by hand: picks that differ",
        len(differ),
        0,
        formula="; ".join(f"{k}: {shown.get(k)} / by hand {again.get(k)}" for k in differ) or "none",
    )


def check_compared_costs(r: Result, chosen: dict, requests: dict, bucket: int) -> None:
    """The compared plans' step causes and their runners-up's, each by hand (cost_checks.check_step_causes): a
    mistake in one of them changes a step the page compares, and with it which plan wins, so each shown plan's terms
    are checked, whichever plan the search picked. `bucket`: DDP's default cap as the installed PyTorch has it."""
    timed = []
    for key, e in chosen.items():
        m, c, t = next(v for k, v in requests.items() if key.startswith(k))
        timed.append((e, m, c, t, "Mixtral-8x7B" if t.moe is not None else "70B"))
    check_step_causes(r, timed, bucket)
