"""A step's causes written out a second way, apart from distlab.planner.cost: the counts, bytes and the way they
combine, each from its definition (TP's four collectives per layer and pass, ring attention's K/V swaps, the
experts' all-to-alls, ZeRO's collectives by stage, the optimizer and its offload over the shard group, the DDP
bucket against PyTorch's own default, the embedding's and head's bytes). The collective times come from the
planner's NCCL model (planner.comms, claimed on chapters 9 and 12) and the kernels' from the kernel model (worked
by hand in kernels_checks, one claim beside these); `check_step_causes` checks every plan a page shows, its
runners-up and its twins (chapters 7, 12, 14, the GB200 appendix, the practice pages), `check_cost_terms` chapter
14's strategies term by term."""

from __future__ import annotations

import math

from distlab.core.results import Result, worst_relative_gap
from distlab.planner.worked_plan_checks import CONFIGS, edge_params, layer_params

NCCL_SMS = 32  # the SMs an overlapped collective takes: NCCL's 32 channels on an H100 node (nccl issue 1685's log)


def _over(comm: float, under: float, c) -> float:
    """A collective hidden behind `under` seconds of compute as far as it can be: what sticks out, and the SMs its
    hidden part takes from the compute (NCCL_SMS of the GPU's)."""
    hidden = min(comm, under)
    return comm - hidden + NCCL_SMS / c.gpu.sms * hidden


def stage_blocks(m, plan) -> int:
    """Blocks on one pipeline stage (equal stages only: the hand references below are for even splits)."""
    assert m.layers % plan.pp == 0, "the references below are for pipelines of equal stages"
    return m.layers // plan.pp


def _tp_layer(m, c, t, plan) -> tuple[float, float]:
    """One layer's exposed TP seconds (forward, backward) with sequence parallelism: an all-gather before the QKV
    and MLP-up GEMMs and a reduce-scatter after the projection and MLP-down, each moving the micro-batch's bf16
    activations of this rank's tokens (seq / cp x hidden x 2 B), the same four in the backward. Without overlap all
    of it is exposed; with Megatron's TP overlap each hides behind (tp - 1) / tp of its GEMM (the backward's GEMMs
    twice the forward's), the hidden part taking NCCL's SMs."""
    from distlab.planner import comms

    if plan.tp == 1:
        return 0.0, 0.0
    assert t.sequence_parallel, "the count below is for sequence parallelism"
    act = plan.micro_batch * t.seq // plan.cp * m.hidden * 2
    g = comms.group(c, plan.tp, 1)
    ag, rs = comms.seconds("all-gather", act, g), comms.seconds("reduce-scatter", act, g)
    if not t.tp_overlap:
        return 2 * ag + 2 * rs, 2 * ag + 2 * rs
    gemm = dict(_layer_kernels(m, c, t, plan).gemms)
    pairs = [(ag, gemm["qkv"]), (rs, gemm["proj"]), (ag, gemm["mlp_up"]), (rs, gemm["mlp_down"])]
    share = (plan.tp - 1) / plan.tp
    return sum(_over(x, y * share, c) for x, y in pairs), sum(_over(x, 2 * y * share, c) for x, y in pairs)


def tp_exposed_by_hand(m, c, t, plan) -> float:
    """A plan's exposed tensor-parallel seconds per step: _tp_layer's, every layer of a stage and micro-batch."""
    return plan.microbatches * stage_blocks(m, plan) * sum(_tp_layer(m, c, t, plan))


def _layer_kernels(m, c, t, plan):
    """One layer's kernels on one GPU for one micro-batch (this rank's seq / cp tokens attending to the whole
    sequence): the kernel model's times (kernels.py, worked by hand in kernels_checks on the same pages)."""
    from distlab.planner.kernels import layer_shape, layer_times

    tokens = plan.micro_batch * t.seq // plan.cp
    shape = layer_shape(
        m, tokens=tokens, kv_tokens=t.seq, micro_batch=plan.micro_batch, tp=plan.tp, sp=t.sequence_parallel, t=t
    )
    return layer_times(m, c.gpu, shape)


def _cp_layer(m, c, t, plan) -> tuple[float, float]:
    """Ring attention's exposed (forward, backward) seconds of one layer and micro-batch: the forward passes this
    rank's K and V (seq / cp tokens x KV heads x head dim / tp, bf16) on around the ring of cp ranks, cp - 1 swaps
    with a ring neighbour (tp GPUs apart, Megatron's tp-cp order); the backward passes K, V and their gradients,
    twice the bytes. Each swap hides behind the attention over a chunk already held: all but one of the cp chunks'
    share of the layer's attention."""
    from distlab.planner import comms

    if plan.cp == 1:
        return 0.0, 0.0
    tokens = plan.micro_batch * t.seq // plan.cp
    mine = 2 * tokens * m.kv * m.head_dim / plan.tp * 2  # K and V, bf16
    swap = comms.seconds("all-gather", 2 * mine, comms.group(c, 2, plan.tp))  # two ranks, one chunk each
    lt = _layer_kernels(m, c, t, plan)
    held = (plan.cp - 1) / plan.cp
    return (
        _over((plan.cp - 1) * swap, lt.attention_forward * held, c),
        _over(2 * (plan.cp - 1) * swap, lt.attention_backward * held, c),
    )


def cp_exposed_by_hand(m, c, t, plan) -> float:
    """Ring attention's exposed seconds per step: _cp_layer's, every layer of a stage and micro-batch."""
    return plan.microbatches * stage_blocks(m, plan) * sum(_cp_layer(m, c, t, plan))


def _ep_layer(m, c, t, plan) -> float:
    """Expert parallelism's exposed seconds of one MoE layer and micro-batch in one pass: the dispatch and the
    combine all-to-all, none hidden (the layer's experts wait for their tokens); each rank sends its tokens' top-k
    copies of the hidden state (seq / cp tokens, split over TP under sequence parallelism, bf16) over the ep ranks
    that hold the other experts, tp x cp GPUs apart (Megatron's tp-cp-ep order). The backward runs the same two."""
    from distlab.planner import comms

    if plan.ep == 1:
        return 0.0
    tokens = plan.micro_batch * t.seq // plan.cp // (plan.tp if t.sequence_parallel else 1)
    sent = tokens * t.moe.top_k * m.hidden * 2
    return 2 * comms.alltoall_seconds(sent, comms.group(c, plan.ep, plan.tp * plan.cp))


def ep_exposed_by_hand(m, c, t, plan) -> float:
    """Expert parallelism's exposed seconds per step: _ep_layer's forward and backward, every layer of a stage (all
    of Mixtral's layers are MoE layers) and micro-batch."""
    return plan.microbatches * stage_blocks(m, plan) * 2 * _ep_layer(m, c, t, plan)


def last_stage_by_hand(m, c, t, plan) -> tuple[float, float, float, float]:
    """(forward, backward, compute, recompute) seconds of one micro-batch on the last stage, the slowest of equal
    stages (it adds the head): each block's kernels plus what its TP, CP and EP collectives leave exposed,
    recomputation repeating in the backward the forward (full) or the core attention and MLP (selective); the
    head's GEMMs and loss (kernels.head_times); without a pipeline the stage also holds the embedding."""
    from distlab.planner.kernels import head_times

    assert t.recompute_modules != ("op",), "torchtitan's per-op policy is not written out here"
    lt = _layer_kernels(m, c, t, plan)
    tp_f, tp_b = _tp_layer(m, c, t, plan)
    cp_f, cp_b = _cp_layer(m, c, t, plan)
    ep = _ep_layer(m, c, t, plan)
    forward = lt.forward + tp_f + cp_f + ep
    gemm = dict(lt.gemms)
    rec = {
        "none": 0.0,
        "full": forward,  # the whole layer again, its collectives too
        # Megatron's selective: the core attention again; its `mlp` (or an MoE's `moe`) module the MLP's GEMMs
        "selective": (lt.attention_forward if "core_attn" in t.recompute_modules else 0.0)
        + (gemm["mlp_up"] + gemm["mlp_down"] if {"mlp", "moe"} & set(t.recompute_modules) else 0.0),
    }[plan.recompute]
    blocks = stage_blocks(m, plan)
    tokens = plan.micro_batch * t.seq // plan.cp
    head_f, head_b = head_times(m, c.gpu, tokens, plan.tp, t.compute_dtype, kernels=t.kernels)
    emb_f, emb_b = embedding_by_hand(m, c, t, plan) if plan.pp == 1 else (0.0, 0.0)
    ends_f, ends_b = head_f + emb_f, head_b + emb_b
    return (
        blocks * forward + ends_f,
        blocks * (lt.backward + tp_b + cp_b + ep + rec) + ends_b,
        blocks * (lt.forward + lt.backward) + ends_f + ends_b,
        blocks * rec,
    )


def optimizer_by_hand(shard: int, c) -> float:
    """The update on the GPU, memory-bound: AdamW reads the bf16 gradient and the fp32 master, m and v, writes them
    and the bf16 weights (2 + 12 + 12 + 2 B per parameter of the rank's shard) at the HBM rate the kernel model
    reaches (MEMORY_EFFICIENCY of the datasheet's)."""
    from distlab.planner.kernels import MEMORY_EFFICIENCY

    return shard * (2 + 12 + 12 + 2) / (c.gpu.hbm_bytes_per_s * MEMORY_EFFICIENCY)


def _shard_group(p) -> int:
    """The ranks one copy of the model state is sharded over: dp x cp (CP ranks hold the same weights), within one
    HSDP replica."""
    return p.dp * p.cp // p.dp_replicate


def _expert_group(p) -> int:
    """The ranks holding the same experts (Megatron-Core's expert data parallelism): the shard group / ep."""
    return max(1, _shard_group(p) // p.ep)


def update_shard(local: int, own: int, p) -> int:
    """Parameters whose update one GPU runs under ZeRO: its dense `local` ones over the shard group, an MoE's `own`
    experts over the expert group."""
    return math.ceil(local / _shard_group(p)) + math.ceil(own / _expert_group(p))


def offload_by_hand(shard: int, c, plan, backward: float) -> float:
    """ZeRO-Offload's exposed seconds per step for a GPU updating `shard` parameters: the bf16 gradient shard down
    PCIe every micro-step (what the micro-step's backward does not cover), the host's AdamW over the shard (read the
    bf16 gradient, fp32 master, m and v; write them and the bf16 weights: 2 + 12 + 12 + 2 B per parameter, the
    node's GPUs sharing its DRAM), the bf16 weights back up PCIe."""
    pcie, host = c.pcie.bandwidth_bytes_per_s, c.host_bytes_per_s / c.gpus_per_node
    down = 2 * shard / pcie
    return plan.microbatches * max(0.0, down - backward) + shard * (2 + 12 + 12 + 2) / host + 2 * shard / pcie


def embedding_by_hand(m, c, t, plan) -> tuple[float, float]:
    """The embedding's (forward, backward) seconds per micro-batch, memory-bound: the forward reads the tokens' bf16
    rows and writes them; the backward zeroes this rank's V/tp x h slice of the gradient, reads the output's
    gradient, and reads and writes the rows it adds into."""
    from distlab.planner.kernels import MEMORY_EFFICIENCY

    hbm = c.gpu.hbm_bytes_per_s * MEMORY_EFFICIENCY
    rows = plan.micro_batch * t.seq // plan.cp * m.hidden * 2
    return 2 * rows / hbm, (math.ceil(m.vocab / plan.tp) * m.hidden * 2 + 3 * rows) / hbm


def embedding_in_the_model(m, c, t, plan) -> tuple[float, float]:
    """What the cost model adds for the embedding: a one-layer stage timed as the first stage less the same stage
    timed as a middle one."""
    from distlab.planner.cost import stage_time

    first = stage_time(m, c, t, plan, 1, first=True, last=False)
    middle = stage_time(m, c, t, plan, 1, first=False, last=False)
    return first.forward - middle.forward, first.backward - middle.backward


def pipeline_ends_by_hand(m, c, t, plan, est) -> list[tuple[float, float]]:
    """(the cost model's, by hand) pairs for a pipelined plan of equal stages: the first stage is a middle stage
    plus the embedding (forward: read the tokens' bf16 rows, write them; backward: zero the V x h gradient, read the
    output's gradient, read and write the rows), the last a middle stage plus the head's GEMMs (T x h by h x V
    forward, two of the same size backward) and the loss's bytes per logit; the step's compute is the slowest
    stage's passes (no TP, no recompute); stage to stage, one micro-batch's bf16 activations (T x h x 2 B) inside
    the NVLink domain when the job fits in it."""
    from distlab.gpu.block_bytes import loss_bytes_per_logit
    from distlab.planner import comms
    from distlab.planner.kernels import FRAMEWORKS, MEMORY_EFFICIENCY, gemm_seconds

    assert plan.tp == plan.cp == 1 and plan.pp > 2 and plan.recompute == "none"
    fwd, bwd = est.stage_forward_seconds, est.stage_backward_seconds
    tokens, hbm = plan.micro_batch * t.seq, c.gpu.hbm_bytes_per_s * MEMORY_EFFICIENCY
    rows = tokens * m.hidden * 2
    emb_f, emb_b = embedding_by_hand(m, c, t, plan)
    loss_f, loss_b = loss_bytes_per_logit(FRAMEWORKS[t.kernels][1])
    head_f = gemm_seconds(c.gpu, tokens, m.vocab, m.hidden) + tokens * m.vocab * loss_f / hbm
    head_b = gemm_seconds(c.gpu, tokens, m.hidden, m.vocab) + gemm_seconds(c.gpu, m.hidden, m.vocab, tokens)
    head_b += tokens * m.vocab * loss_b / hbm
    slowest = max(range(plan.pp), key=lambda s: fwd[s] + bwd[s])
    return [
        (fwd[0] - fwd[1], emb_f),
        (bwd[0] - bwd[1], emb_b),
        (fwd[-1] - fwd[1], head_f),
        (bwd[-1] - bwd[1], head_b),
        (est.breakdown.compute, plan.microbatches * (fwd[slowest] + bwd[slowest])),
        (est.p2p_seconds, comms.p2p_seconds(c, rows, plan.gpus > c.domain)),
    ]


def dp_exposed_by_hand(model: str, local: int, own: int, c, t, p, forward: float, backward: float, bucket: int):
    """The data-parallel collectives' exposed seconds per step, every ZeRO stage, from the definitions: the model
    state's ranks are the shard group (dp x cp within one HSDP replica, tp apart), an MoE's experts' the group / ep
    ranks holding the same experts (tp x ep apart), and a reduced shard is all-reduced across the replicas (tp x
    group apart). Gradients and weights move in bf16 (mixed precision). A collective hidden behind compute still
    takes NCCL's SMs. DDP (ZeRO-0): one all-reduce behind the backward, its last bucket exposed. ZeRO-1 (and ZeRO-3
    under a pipeline, which keeps its stage gathered and adds one gather per step): the reduce-scatter behind the
    last micro-batch's backward, its last bucket exposed, the all-gather behind the next forward. ZeRO-2 under a
    pipeline: the reduce-scatter every micro-batch. ZeRO-2/3 without one: per layer and micro-batch (dense models;
    None for an MoE's, not written out here). `local`, `own`: the largest stage's dense and expert parameters;
    `forward`, `backward`: the first stage's passes of one micro-batch."""
    from distlab.planner import comms

    assert t.precision == "mixed" and t.grad_reduce_overlap, "bf16 gradients, reduced during the backward"
    group = _shard_group(p)
    g = comms.group(c, group, p.tp)
    g_ex = comms.group(c, _expert_group(p), p.tp * p.ep)
    g_rep = comms.group(c, p.dp_replicate, p.tp * group)
    if group * p.dp_replicate == 1:
        return 0.0

    def both(op: str, dense: float, experts: float = 0.0) -> float:
        return comms.seconds(op, dense, g) + (comms.seconds(op, experts, g_ex) if experts else 0.0)

    def reduce(dense: float, experts: float = 0.0) -> float:
        across = comms.seconds("all-reduce", dense / group + experts / _expert_group(p), g_rep)
        return both("reduce-scatter", dense, experts) + across

    def over(comm: float, under: float) -> float:
        return _over(comm, under, c)

    if p.zero == 0:
        last = comms.seconds("all-reduce", min(bucket, 2 * local), g)
        return over(both("all-reduce", 2 * local, 2 * own), backward) + last
    rs, ag = reduce(2 * local, 2 * own), both("all-gather", 2 * local, 2 * own)
    last = reduce(min(bucket, 2 * local))
    if p.zero == 1 or (p.zero == 3 and p.pp > 1):
        return over(rs, backward) + last + over(ag, forward) + (ag if p.zero == 3 else 0.0)
    if p.pp > 1:  # ZeRO-2 under a pipeline
        return p.microbatches * (over(rs, backward) + last) + over(ag, forward)
    if own:
        return None
    layers = CONFIGS[model]["layers"]
    per_layer = math.ceil(layer_params(model) / p.tp)
    ends = local - layers * per_layer
    ag_l, rs_l = both("all-gather", 2 * per_layer), reduce(2 * per_layer)
    again = ag_l if p.zero == 3 else 0.0
    per_micro = ag_l + comms.seconds("all-gather", 2 * ends, g) + reduce(2 * ends)
    per_micro += layers * (over(ag_l, forward / layers) + over(again + rs_l, backward / layers))
    return p.microbatches * per_micro


def step_causes_by_hand(e, m, c, t, model: str, bucket: int) -> list[tuple[float, float]]:
    """(the cost model's, by hand) pairs for one plan of equal stages, `model` naming its CONFIGS entry: the CP and
    EP exposures, TP's, the last stage's forward, backward, compute and recomputation, the stage-to-stage send, the
    optimizer step or its offload, and the data-parallel collectives (dp_exposed_by_hand); the bubble only as none
    without a pipeline and a lower bound with one; the stragglers not at all. `bucket`: DDP's bucket cap (PyTorch's
    default)."""
    from distlab.planner import comms
    from distlab.planner.cost import stage_time

    p, b = e.plan, e.time.breakdown
    local, own = _largest_stage_params(model, t.seq, p)
    pairs = [(b.exposed_cp_ep, cp_exposed_by_hand(m, c, t, p) + ep_exposed_by_hand(m, c, t, p))]
    pairs.append((b.exposed_tp, tp_exposed_by_hand(m, c, t, p)))
    forward, backward, compute, recompute = last_stage_by_hand(m, c, t, p)
    n = p.microbatches
    pairs += [(e.time.forward_seconds, forward), (e.time.backward_seconds, backward)]
    pairs += [(b.compute, n * compute), (b.recompute, n * recompute)]
    # no pipeline, no bubble; a pipeline idles at least (p - 1) / v forward passes of its fastest stage (1F1B and
    # interleaved: (p - 1) / v of forward and backward; ZB-H1: (p - 1) forwards), a bound written as a pair
    floor = (p.pp - 1) / p.virtual * min(e.time.stage_forward_seconds, default=0.0)
    pairs.append((b.bubble, 0.0) if p.pp == 1 else (min(b.bubble, floor), floor))
    if p.pp > 1:  # stage to stage: one micro-batch's bf16 activations (split over TP under SP), between NVLink
        # domains when one stage fills a domain (Megatron puts PP outermost: stages tp x cp x dp GPUs apart)
        act = p.micro_batch * t.seq // p.cp * m.hidden * 2 / (p.tp if t.sequence_parallel and p.tp > 1 else 1)
        pairs.append((e.time.p2p_seconds, comms.p2p_seconds(c, act, p.tp * p.cp * p.dp >= c.domain)))
        pairs.append(_search_bubble_pair(m, c, t, e, pipeline_send=e.time.p2p_seconds))
    if p.offload == "none":
        pairs.append((b.optimizer, optimizer_by_hand(update_shard(local, own, p) if p.zero else local + own, c)))
    if p.offload == "optimizer":
        last = stage_time(m, c, t, p, stage_blocks(m, p), first=p.pp == 1, last=True)
        pairs.append((b.offload, offload_by_hand(update_shard(local, own, p), c, p, last.backward)))
    first = e.time.stage_forward_seconds[0], e.time.stage_backward_seconds[0]
    dp = dp_exposed_by_hand(model, local, own, c, t, p, *first, bucket)
    if dp is not None:
        pairs.append((b.exposed_dp, dp))
    return pairs


def _search_bubble_pair(m, c, t, e, pipeline_send: float) -> tuple[float, float]:
    """The search ranks candidates by a closed-form pipeline before it simulates the best few, so a slip there
    changes which plan is shown while every shown plan stays right. By hand: the slowest stage idles (p - 1) / v
    of its micro-batch's forward and backward (1F1B, interleaved: Narayanan et al. 2021, Section 2.2), ZB-H1 idles
    (p - 1) forwards (Qi et al. 2023), and the activations cross 2 (p - 1) stage boundaries on the critical path."""
    from distlab.planner.cost import step

    p = e.plan
    f, b = max(zip(e.time.stage_forward_seconds, e.time.stage_backward_seconds), key=sum)
    idle = (p.pp - 1) * f if p.schedule == "zb-h1" else (p.pp - 1) / p.virtual * (f + b)
    closed = step(m, c, t, p, exact_pipeline=False).breakdown.bubble
    return closed, idle + 2 * (p.pp - 1) * pipeline_send


def _largest_stage_params(model: str, seq: int, p) -> tuple[int, int]:
    """(dense, experts') parameters one GPU of the largest stage holds, as plan_memory counts them: its blocks'
    attention and norms and its end split by TP, the router whole, E / ep experts of three h x f matrices per layer
    split by TP. Of equal stages the largest is the last for Llama (the final norm and the untied head beat the
    embedding by h) and the first for GPT (the embedding and learned positions beat the final LayerNorm and the tied
    head's copy)."""
    cfg = CONFIGS[model]
    h, f, experts = cfg["hidden"], cfg["ffn"], cfg.get("experts", 0)
    router = h * experts
    here = cfg["layers"] // p.pp
    block = layer_params(model) - experts * 3 * h * f - router
    end = max(edge_params(model, seq, first, last, p.pp) for first, last in ((True, p.pp == 1), (p.pp == 1, True)))
    dense = math.ceil((here * block + end) / p.tp) + here * router
    return dense, here * (experts // p.ep * 3 * h * f // p.tp)


def check_cost_terms(r: Result, m, c, t, plans: dict, local_params: int, torch_bucket_bytes: int) -> None:
    """The TP 8 and offloaded strategies' exposed TP and offload seconds, and the DDP bucket cap, against the
    references above. `plans` is the strategy table's {name: (plan, memory, estimate)}; `local_params` the 7B
    model's parameters (TP 1, no pipeline); `torch_bucket_bytes` DDP's default cap as the installed PyTorch has it
    (read by the experiment: a formula module imports no torch)."""
    from distlab.planner.cost import DDP_BUCKET_BYTES, stage_time

    tp8 = plans["TP 8 (no ZeRO)"]
    off = plans["ZeRO-3 + CPU offload"]
    p = off[0]
    backward = stage_time(m, c, t, p, m.layers, first=True, last=True).backward
    z1 = plans["ZeRO-1"]
    micro = stage_time(m, c, t, z1[0], m.layers, first=True, last=True)
    tp2 = plans["TP 2 x ZeRO-3"][0]
    embedding = zip(embedding_in_the_model(m, c, t, tp2), embedding_by_hand(m, c, t, tp2))  # the V/tp slice
    pp4 = plans["PP 4 x DP 2, ZeRO-1"]
    stage = pp4[2].time
    blocks = m.layers // pp4[0].pp * layer_params("7B")  # the largest stage: the last, its blocks and the head
    pairs = [
        *pipeline_ends_by_hand(m, c, t, pp4[0], stage),
        *embedding,
        (
            stage.breakdown.exposed_dp,
            dp_exposed_by_hand(
                "7B",
                blocks + edge_params("7B", 0, False, True, pp4[0].pp),
                0,
                c,
                t,
                pp4[0],
                stage.stage_forward_seconds[0],
                stage.stage_backward_seconds[0],
                torch_bucket_bytes,
            ),
        ),
        *(
            (
                e.time.breakdown.exposed_dp,
                dp_exposed_by_hand(
                    "7B",
                    math.ceil(local_params / plan.tp),
                    0,
                    c,
                    t,
                    plan,
                    e.time.forward_seconds,
                    e.time.backward_seconds,
                    torch_bucket_bytes,
                ),
            )
            for plan, _, e in (plans[k] for k in ("ZeRO-2", "ZeRO-3 / FSDP", "TP 2 x ZeRO-3"))
        ),
        (
            z1[2].time.breakdown.exposed_dp,
            dp_exposed_by_hand("7B", local_params, 0, c, t, z1[0], micro.forward, micro.backward, torch_bucket_bytes),
        ),
        (DDP_BUCKET_BYTES, torch_bucket_bytes),
        (tp8[2].time.breakdown.exposed_tp, tp_exposed_by_hand(m, c, t, tp8[0])),
        (off[2].time.breakdown.offload, offload_by_hand(update_shard(local_params, 0, p), c, p, backward)),
    ]
    r.claim(
        "chapter 14's cost terms by hand: ZeRO-1's exposed data-parallel time (alone and under PP 4), ZeRO-2's and "
        "ZeRO-3's per-layer gathers and reduce-scatters, DDP's bucket cap = PyTorch's default, TP 8's exposed "
        "collectives (4 per layer and pass), the offloaded plan's PCIe transfers and host AdamW, PP 4's embedding, "
        "head, compute and stage-to-stage sends (worst relative gap)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-9,
        formula="n L 2 (2 AG + 2 RS) of s b h 2 B; n max(0, 2S/PCIe - bwd) + 28 S / (DRAM / GPUs) + 2S/PCIe; "
        "embedding 2Th2 B forward, (Vh + 3Th)2 B backward; head 2ThV at the GEMM rate",
    )


def twins(plan, layers: int = 0) -> list:
    """The layouts beside a shown plan whose paths through the cost model no shown plan may take, so that a mistake
    there, which changes which plan wins, is still seen: the plan at every other ZeRO stage, with the optimizer
    offload toggled, a pipelined plan's stages turned into data parallelism, and (given an even `layers`) a plan
    without a pipeline split into 2 stages of half its replicas (the search's closed-form pipeline, which ranks
    the candidates, is then checked even where every shown plan is flat)."""
    from dataclasses import replace

    flat = [replace(plan, pp=1, dp=plan.dp * plan.pp, schedule="1f1b", virtual=1)] if plan.pp > 1 else []
    out = []
    if plan.pp == 1 and plan.dp % 2 == 0 and layers and layers % 2 == 0:
        try:
            out.append(replace(plan, pp=2, dp=plan.dp // 2, microbatches=plan.microbatches * 2))
        except ValueError:  # a layout the planner refuses
            pass
    for base in [plan, *flat]:
        for zero in range(4):
            for offload in ("none", "optimizer"):
                try:
                    q = replace(base, zero=zero, offload=offload)
                except ValueError:  # a combination the planner refuses (offload without ZeRO, ...)
                    continue
                out += [q] if q != plan and q not in out else []
    return out


def check_step_causes(r: Result, timed: list[tuple], bucket: int) -> None:
    """One claim over the plans a page shows: `timed` holds (estimate, model, cluster, training, CONFIGS name) per
    plan; their causes by hand (step_causes_by_hand), and those of each plan's twins (every ZeRO stage, the
    optimizer on the GPU or the host, no pipeline), each timed by the cost model on its own. Pipelines of unequal
    stages are not written out here, and the claim says how many it leaves."""
    from types import SimpleNamespace

    from distlab.planner.cost import step
    from distlab.planner.kernels_checks import kernel_model_by_hand

    kernel_model_by_hand(r)  # the kernel model under every layer time below, and the fused layer's bytes
    pairs, uneven = [], 0
    for e, m, c, t, name in timed:
        if m.layers % e.plan.pp:
            uneven += 1
            continue
        pairs += step_causes_by_hand(e, m, c, t, name, bucket)
        for q in twins(e.plan, m.layers):
            pairs += step_causes_by_hand(SimpleNamespace(plan=q, time=step(m, c, t, q)), m, c, t, name, bucket)
    r.claim(
        f"the {len(timed) - uneven} shown plans' step causes by hand ({len(pairs)} terms; uneven pipelines left: "
        f"{uneven}): worst gap",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-9,
    )
