"""The decision rules run by the planner on 7B-175B models and four clusters, a long-sequence request and a
mixture-of-experts request, each rule's verdict beside the plan (experiment parallel-rules)."""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.results import Quantity, Result
from distlab.models.shapes import ModelShape, preset
from distlab.planner.config import Cluster, Plan, Training, cluster
from distlab.planner.cost import memory_per_gpu
from distlab.planner.rules import (
    LONG_SEQ,
    MIN_HEADROOM,
    Choice,
    decisions,
    pipeline_sizes,
    tensor_sizes,
    tp_overhead_closed_form,
    zero3_hidden_tokens,
)
from distlab.planner.rules_checks import (
    check_closed_forms,
    check_compared_costs,
    check_compared_memory,
    check_labels,
    check_picks,
    check_plan_memory,
    check_search_figures,
)
from distlab.planner.worked_plan_7b import ddp_bucket_bytes_of_torch

# ---------------------------------------------------------------- the experiment
MODELS = ("7B", "13B", "70B", "175B")
LONG_EXAMPLE = 131072  # tokens per sequence in the long-context request
RULES_CLUSTER = "8 nodes, 64 H100, NVLink + IB NDR"  # the long-context, MoE and rules-table requests' cluster
MOE_MODEL = "Mixtral-8x7B"  # moe_models.toml: 8 experts per layer, top-2


def clusters() -> dict[str, Cluster]:
    return {
        "1 node, 8 H100, NVLink": cluster("H100-SXM", nodes=1),
        "8 nodes, 64 H100, NVLink + IB NDR": cluster("H100-SXM", nodes=8),
        "128 nodes, 1024 H100, NVLink + IB NDR": cluster("H100-SXM", nodes=128),
        "8 nodes, 64 A100, PCIe 4 + 100 GbE": cluster(
            "A100-SXM-80GB", nodes=8, intra="PCIe4-x16", inter="Ethernet-100G"
        ),
        "4 GB200 NVL72 racks, 16 trays each, 256 GPUs": nvl72(racks=4, trays=16),
    }


def nvl72(*, racks: int, trays: int | None = None) -> Cluster:
    """GB200 NVL72 racks: compute trays of 4 GPUs (interconnect.toml, gpus_per_tray), one 72-GPU NVLink domain per
    rack (gpus_per_domain), one NDR NIC per GPU between racks. `trays` < 18: a job that takes that many of each rack's
    trays (16: 64-GPU domains that TP 16 tiles)."""
    from distlab.core.facts import value

    per_tray = value("interconnect.NVSwitch-GB200-NVL72.gpus_per_tray")
    domain = value("interconnect.NVSwitch-GB200-NVL72.gpus_per_domain")
    trays = trays or domain // per_tray
    return cluster("GB200", gpus_per_node=per_tray, nodes=racks * trays, nvlink_domain=per_tray * trays)


def pretraining(m: ModelShape, seq: int | None = None) -> Training:
    from distlab.planner.search import PRETRAIN_BATCH_TOKENS

    return Training(global_batch_tokens=PRETRAIN_BATCH_TOKENS, seq=seq or m.seq)


def _batch_tokens() -> int:
    return pretraining(preset("7B")).global_batch_tokens


def _short(d: dict[str, Choice]) -> str:
    """The verdicts that shaped the plan, as a table cell."""
    extra = [d["context"].reason] if d["context"].value != [1] else []
    return "; ".join([d["pipeline"].reason, d["zero"].reason, *extra])


@experiment(
    "parallel-rules",
    "3D parallelism decision rules, run by the planner: the plan for 7B, 13B, 70B and "
    "175B on typical clusters, a long-sequence (CP) and a mixture-of-experts (EP) request",
    kind="computed",
)
def parallel_rules(device: str) -> Result:
    from distlab.planner.search import NothingFits, search

    r = Result("parallel-rules", kind="computed")
    rows: list[list[object]] = []
    for name in MODELS:
        m = preset(name)
        t = pretraining(m)
        for label, c in clusters().items():
            try:
                best = search(m, c, t)[0]
            except NothingFits as e:
                rows.append([name, label, "does not fit", "—", "—", str(e).split(";")[0]])
                continue
            p = best.plan
            d = decisions(m, c, t, p)
            r.claim(f"{name} on {label}: TP inside the NVLink domain", c.domain % p.tp, 0)
            if d["pipeline"].value == [1]:
                r.claim(f"{name} on {label}: no pipeline where the rule says none is needed", p.pp, 1)
            rows.append(
                [name, label, p.label(), Quantity(best.memory_bytes, "B"), Quantity(best.step_seconds, "s"), _short(d)]
            )
            r.data[f"{name} / {label}"] = {"label": best.plan.label(), "step_seconds": best.step_seconds}
    chosen = picks(runners_up=True)
    _long(r, rows, chosen)
    _moe(r, rows, chosen)
    r.table(
        "plans",
        ["model", "cluster", "best plan", "memory per GPU", "step", "the rules' verdicts"],
        rows,
        caption=f"distlab plan with the rules: pretraining at {_batch_tokens() / 2**20:g}M tokens per step, "
        "each model's training sequence, mixed-precision AdamW, FlashAttention",
    )
    _rules_table(r, chosen)
    _closed_forms(r)
    check_compared_costs(r, chosen, requests(), ddp_bucket_bytes_of_torch())
    return r


def moe_request() -> tuple[ModelShape, Training]:
    from distlab.planner.moe import moe_model

    m, spec = moe_model(MOE_MODEL)
    return m, Training(global_batch_tokens=_batch_tokens(), seq=m.seq, moe=spec)


def requests() -> dict:
    """The page's three requests on 64 H100s, by the prefix of the compared plans' keys: (model, cluster, training)
    for 70B at LONG_EXAMPLE tokens, 70B at its 4k, Mixtral 8x7B."""
    c, m = clusters()[RULES_CLUSTER], preset("70B")
    mm, tm = moe_request()
    return {"long": (m, c, pretraining(m, LONG_EXAMPLE)), "cp_cut": (m, c, pretraining(m)), "moe": (mm, c, tm)}


def picks(sizer=None, runners_up: bool = False) -> dict:
    """The plans the page compares, each the search's pick on 64 H100s: the long request's best and best without CP,
    70B's best at 4k tokens with the rules and without them, Mixtral's best, and of its plans that keep the headroom
    rule the best with EP inside the NVLink domain and the best with its EP group across nodes. `sizer` replaces the
    memory model (rules_checks picks them again with each plan sized by hand); `runners_up` adds each pick's next
    two as "<key>~1", "<key>~2" (the step causes by hand check them too: a mistake that slows a pick shows its
    runner-up instead, correctly timed)."""
    from distlab.planner.search import NothingFits, search

    asked = requests()
    m, c, long_t = asked["long"]
    t, (mm, _, tm) = asked["cp_cut"][2], asked["moe"]
    ranked = search(mm, c, tm, sizer=sizer)
    # the comparisons keep to the headroom rule too: a plan at the memory edge is not one anybody would run
    roomy = [e for e in ranked if e.headroom_fraction >= MIN_HEADROOM]
    lists = {
        "long_best": search(m, c, long_t, sizer=sizer),
        "cp_cut_rules": search(m, c, t, sizer=sizer),
        "cp_cut_free": search(m, c, t, rules=(), sizer=sizer),  # CP at 4k tokens too
        "moe_best": ranked,
        "moe_inside": [e for e in roomy if e.plan.ep > 1 and e.plan.tp * e.plan.ep <= c.domain],
        "moe_cross_node": [e for e in roomy if e.plan.tp * e.plan.ep > c.domain],
    }
    try:
        lists["long_no_cp"] = search(m, c, long_t, where=lambda q: q.cp == 1, sizer=sizer)
    except NothingFits:
        pass
    out = {k: v[0] for k, v in lists.items() if v}
    if runners_up:
        out |= {f"{k}~{i}": e for k, v in lists.items() for i, e in enumerate(v[1:3], 1)}
    return out


def _long(r: Result, rows: list, chosen: dict) -> None:
    label = RULES_CLUSTER
    c, m = clusters()[label], preset("70B")
    t = pretraining(m, LONG_EXAMPLE)
    best = chosen["long_best"]
    p = best.plan
    r.claim(f"70B at {LONG_EXAMPLE} tokens on {label}: the best plan uses context parallelism", p.cp, 2, relation=">=")
    if "long_no_cp" in chosen:
        no_cp = chosen["long_no_cp"]
        _compared(r, long_best=best, long_no_cp=no_cp)
        r.add(
            "long_no_cp_slowdown",
            no_cp.step_seconds / best.step_seconds - 1,
            "fraction",
            "70B at the long sequence: how much slower the best plan without CP is",
        )
        r.data["long_no_cp_label"] = no_cp.plan.label()
    else:
        r.data["long_no_cp_label"] = "nothing fits"
    rows.append(
        [
            f"70B, {LONG_EXAMPLE:,}-token sequences",
            label,
            p.label(),
            Quantity(best.memory_bytes, "B"),
            Quantity(best.step_seconds, "s"),
            _short(decisions(m, c, t, p)),
        ]
    )
    r.add("long_seq", LONG_EXAMPLE, "tokens", "long-context example")
    r.add("long_threshold", LONG_SEQ, "tokens", "context parallelism is considered from this length")
    r.add("long_cp", p.cp, "", "context-parallel size the planner chooses at that length")
    r.add("long_tp", p.tp, "", "tensor-parallel size the planner chooses at that length")


def _moe(r: Result, rows: list, chosen: dict) -> None:
    """Mixtral 8x7B (moe_models.toml) on 64 H100s: the planner searches EP with the rest, timing the dispatch and
    combine all-to-alls inside the NVLink domain or across nodes (distlab.planner.cost)."""
    label = RULES_CLUSTER
    c = clusters()[label]
    m, t = moe_request()
    spec = t.moe
    assert spec is not None
    best = chosen["moe_best"]
    ep = best.plan.ep
    inside = best.plan.tp * ep <= c.domain
    r.claim(
        f"{MOE_MODEL} on {label}: EP divides the experts and DP x CP",
        (spec.experts % ep) + ((best.plan.dp * best.plan.cp) % ep),
        0,
    )
    rows.append(
        [
            f"{m.name}, {spec.experts} experts, top-{spec.top_k}",
            label,
            best.plan.label(),
            Quantity(best.memory_bytes, "B"),
            Quantity(best.step_seconds, "s"),
            f"EP {ep} {'inside the NVLink domain' if inside else 'across NVLink domains'}; all-to-alls "
            f"{best.time.breakdown.exposed_cp_ep / best.step_seconds:.1%} of the step",
        ]
    )
    r.add("moe_experts", spec.experts, "", "experts per MoE layer in the example")
    r.add("moe_top_k", spec.top_k, "", "experts each token is routed to")
    r.add("moe_ep", ep, "", "expert-parallel size of the best plan")
    r.add("moe_a2a_share", best.time.breakdown.exposed_cp_ep / best.step_seconds, "fraction", "its all-to-all share")
    _compared(r, moe_best=best)
    near, wide = chosen.get("moe_inside"), chosen.get("moe_cross_node")
    if near:
        _compared(r, moe_inside=near)
        r.add("moe_inside_ep", near.plan.ep, "", "the best plan with EP > 1 inside the NVLink domain: its EP")
        r.add("moe_inside_a2a", near.time.breakdown.exposed_cp_ep / near.step_seconds, "fraction", "its a2a share")
        r.add("moe_inside_slowdown", near.step_seconds / best.step_seconds - 1, "fraction", "how much slower")
    if wide:
        _compared(r, moe_cross_node=wide)
        r.add(
            "moe_cross_node_slowdown",
            wide.step_seconds / best.step_seconds - 1,
            "fraction",
            "the best plan whose EP group leaves the node, how much slower",
        )
        r.data["moe_cross_node_label"] = wide.plan.label()
        r.claim(
            f"{MOE_MODEL}: an EP group that leaves the node is slower than the best plan (all-to-alls on the NICs)",
            wide.step_seconds,
            best.step_seconds,
            relation=">=",
            unit="s",
        )
        if near:
            r.claim(
                f"{MOE_MODEL}: the best EP plan inside the NVLink domain beats the best across",
                near.step_seconds,
                wide.step_seconds,
                relation="<=",
                unit="s",
            )
        r.add(
            "moe_cross_node_a2a",
            wide.time.breakdown.exposed_cp_ep / wide.step_seconds,
            "fraction",
            "that plan's exposed all-to-all share",
        )
        r.add("moe_cross_node_ep", wide.plan.ep, "", "that plan's EP")


def _compared(r: Result, **plans) -> None:
    """Keep the step breakdowns of the plans the page compares (rules_checks re-derives the shares and slowdowns
    shown from their causes)."""
    r.data.setdefault("compared", {}).update({k: e.time.breakdown.as_dict() for k, e in plans.items()})
    r.data.setdefault("compared_plans", {}).update(
        {
            k: {
                "label": e.plan.label(),
                "memory": e.memory_bytes,
                # what the fit test adds to the memory: the allocator's fragmentation, the CUDA context
                "beyond": e.memory.reserved_bytes + e.memory.outside_allocator_bytes - e.memory_bytes,
                "usable": e.usable_bytes,
            }
            for k, e in plans.items()
        }
    )


def _rules_table(r: Result, chosen: dict) -> None:
    """Every rule's verdict for one request: 70B on 64 H100s, at the best plan's TP and CP."""
    from distlab.planner.search import search

    c, m = clusters()[RULES_CLUSTER], preset("70B")
    t = pretraining(m)
    best = chosen["cp_cut_rules"]
    p = best.plan
    d = decisions(m, c, t, p)
    rows = [[rule, str(ch.value), ch.reason] for rule, ch in d.items()]
    for tp in tensor_sizes(m, c).value:
        ch = pipeline_sizes(m, c, t, tp, 1)
        rows.append([f"pipeline at TP {tp}", "1" if ch.value == [1] else f"1 to {ch.value[-1]}", ch.reason])
    r.table(
        "rules",
        ["rule", "verdict", "why"],
        rows,
        caption=f"The rules for 70B on 64 H100s, at the best plan's TP {p.tp} and CP {p.cp}",
    )
    r.add("rules_70b_tp", p.tp, "", "70B on 64 H100s: the best plan's TP")
    free = search(m, c, t, rules=("cp-long-only",))[0]
    r.claim(
        "70B on 64 H100s: the TP and PP rules drop no best plan (the search without them finds the same)",
        free.step_seconds,
        best.step_seconds,
        rel_tol=1e-12,
        unit="s",
    )
    exhaustive = chosen["cp_cut_free"]
    _compared(r, cp_cut_rules=best, cp_cut_free=exhaustive)
    r.add(
        "cp_cut_cost",
        best.step_seconds / exhaustive.step_seconds - 1,
        "fraction",
        "70B on 64 H100s: how much faster the cost model finds CP at 4k tokens than the best plan without it",
    )
    r.data["cp_cut_label"] = exhaustive.plan.label()
    r.add("cp_cut_tp", exhaustive.plan.tp, "", "70B on 64 H100s at 4k tokens, no rules: the best plan's TP")
    r.add("cp_cut_cp", exhaustive.plan.cp, "", "70B on 64 H100s at 4k tokens, no rules: the best plan's CP")


def _closed_forms(r: Result) -> None:
    """TP's cost as a share of the layer's compute, by the chapter's closed form 2(t-1)F/(9hB), on one basis: F the
    H100's sustained matmul rate, B the link's bus bandwidth as the planner takes it (NVLink fitted to nccl-tests,
    a network port at line rate). The planner's own TP time for the same layer, no overlap, must agree."""
    from distlab.hardware.collectives import fitted_bus_bandwidth
    from distlab.hardware.links import link
    from distlab.planner.config import usable_bytes
    from distlab.planner.cost import stage_time
    from distlab.planner.kernels import layer_shape, layer_times, matmul_fraction

    chip = cluster("H100-SXM").gpu
    flops = chip.peak_flops("bf16") * matmul_fraction(chip)
    nvlink, ib = fitted_bus_bandwidth(link("NVLink4-H100")), fitted_bus_bandwidth(link("InfiniBand-NDR"))
    m = preset("70B")
    r.add("sustained_flops", flops, "FLOP/s", "H100: the sustained matmul rate the closed form uses")
    r.add("nvlink_bus", nvlink, "B/s", "NVLink 4 bus bandwidth (fitted to nccl-tests)")
    for tp, bw, key in ((8, nvlink, "tp8_nvlink"), (16, ib, "tp16_ib"), (2, ib, "tp2_ib")):
        r.add(
            f"70b_{key}_overhead",
            tp_overhead_closed_form(tp, m.hidden, flops, bw),
            "",
            f"70B: TP all-reduce time over layer compute, t={tp} (sustained F, bus B, no overlap)",
        )
    # the planner's cost model against the closed form: GPT-3's layer is 12h^2 (+13h) parameters
    gpt3, c = preset("175B"), cluster("H100-SXM", nodes=1)
    t = Training(global_batch_tokens=64 * gpt3.seq, seq=gpt3.seq, sequence_parallel=False, tp_overlap=False)
    p = Plan(tp=8, micro_batch=64, microbatches=1)  # large messages: NCCL's per-step latency is negligible
    ls = layer_shape(gpt3, tokens=64 * gpt3.seq, kv_tokens=gpt3.seq, micro_batch=64, tp=8, sp=False, t=t)
    lt = layer_times(gpt3, c.gpu, ls)
    st = stage_time(gpt3, c, t, p, 1, first=False, last=False)
    ratio = st.traffic["tp"] / (lt.gemm_forward + lt.gemm_backward)
    r.claim(
        "175B, t = 8: the planner's TP all-reduce time over matmul time = 2(t-1)F/(9hB) at the rates it assumes",
        ratio,
        tp_overhead_closed_form(
            8,
            gpt3.hidden,
            3 * 2 * 64 * gpt3.seq * 12 * gpt3.hidden**2 / 8 / (lt.gemm_forward + lt.gemm_backward),
            fitted_bus_bandwidth(c.intra),
        ),
        rel_tol=0.02,
        formula="F = the layer's matmul FLOPs over its matmul time, B the NVLink bus bandwidth; latency adds < 2 %",
    )
    c8 = cluster("H100-SXM", nodes=8)
    t = pretraining(m)
    one = memory_per_gpu(m, c8, t, Plan(tp=8, pp=1, dp=8, zero=1, microbatches=16)).activations
    eight = memory_per_gpu(m, c8, t, Plan(tp=8, pp=8, dp=1, microbatches=128)).activations
    r.claim(
        "70B, t = 8: 1F1B's first stage holds as many activations with p = 8 as with p = 1",
        eight,
        one,
        rel_tol=1e-12,
        unit="B",
        formula="L/p layers x p micro-batches in flight",
    )
    r.add("70b_stage0_activations", eight, "B", "70B, t=8: activations on pipeline stage 0, p = 8")
    r.add(
        "zero3_hidden_tokens",
        zero3_hidden_tokens(flops, ib),
        "tokens",
        "tokens per data-parallel replica per step above which ZeRO-3 traffic hides (H100, IB NDR)",
    )
    a100 = cluster("A100-SXM-80GB").gpu
    r.add(
        "zero3_hidden_tokens_ethernet",
        zero3_hidden_tokens(
            a100.peak_flops("bf16") * matmul_fraction(a100), link("Ethernet-100G").bandwidth_bytes_per_s
        ),
        "tokens",
        "the same for A100 over 100 GbE",
    )
    r.add("global_batch_tokens", t.global_batch_tokens, "tokens", "global batch assumed")
    r.add(
        "tokens_per_replica_1024",
        t.global_batch_tokens // 1024,
        "tokens",
        "tokens per step each of 1024 data-parallel replicas gets",
    )
    r.add("usable_h100", usable_bytes(chip), "B", "usable memory per H100")
    check_closed_forms(r, nvlink)
    check_search_figures(r)
    check_labels(r, clusters(), RULES_CLUSTER)
    check_plan_memory(r)
    check_compared_memory(r)
    check_picks(r, picks, clusters())
