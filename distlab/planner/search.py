"""The planner: every way to run a training step on a cluster that fits in memory, ranked by step time.

Given a model, a cluster and the training settings (distlab.planner.config), `search` enumerates the plans
that chapter 7's rules allow (distlab.planner.rules): tensor parallelism inside a node (t divides the
heads), pipeline stages that divide the layers where a pipeline-free plan does not fit, context
parallelism for long sequences, data parallelism for the rest; ZeRO stage 0-3 (0-1 with pipelines),
micro-batch and gradient accumulation (the global batch is fixed), recomputation and CPU offload. Each
plan's memory comes first (cheap: those that do not fit are dropped); the survivors are timed with
distlab.planner.cost, the pipeline by its closed form; the best few are timed again with the op-by-op
pipeline simulator and re-ranked. `explain` says why the winner won, in words.

Pruning keeps 175B on 1024 GPUs to a few hundred plans: the rules (TP only in powers of two within a
node, context parallelism only from 16k tokens, pipelines only where needed), micro-batches in powers of
two up to 64, pipelines only with at least as many micro-batches as stages. The tests check that the
rules drop no best plan: the exhaustive search (rules=()) finds the same one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from distlab.core.cli import MAX_GPUS, MAX_TOKENS, command, emit, parser, positive
from distlab.models.shapes import ModelShape
from distlab.planner.config import ATTENTION, OPTIMIZERS, PRECISIONS, TASKS, Cluster, Plan, Training, cluster, model
from distlab.planner.cost import device_bytes, memory, step
from distlab.planner.rules import context_sizes, decisions, pipeline_sizes, powers_of_two, tensor_sizes, zero_stages

MAX_MICRO_BATCH = 64


RESIMULATE = 8  # plans timed again with the op-by-op pipeline simulator


PRETRAIN_BATCH_TOKENS = 4 * 1024 * 1024  # Llama 2's global batch


@dataclass
class Estimate:
    """A plan with its memory and time."""

    plan: Plan
    memory: dict[str, float]
    time: dict

    @property
    def memory_bytes(self) -> float:
        return device_bytes(self.memory)

    @property
    def step_seconds(self) -> float:
        return self.time["step_seconds"]

    def to_dict(self) -> dict:
        p, t = self.plan, self.time
        return {
            "label": p.label(),
            "dp": p.dp,
            "tp": p.tp,
            "pp": p.pp,
            "cp": p.cp,
            "zero": p.zero,
            "micro_batch": p.micro_batch,
            "grad_accumulation": p.microbatches,
            "recompute": p.recompute,
            "offload": p.offload,
            "memory_bytes_per_gpu": self.memory_bytes,
            "memory_by_category": {k: v for k, v in self.memory.items() if k != "host"},
            "host_bytes_per_gpu": self.memory["host"],
            "step_seconds": t["step_seconds"],
            "time_by_component": t["parts"],
            "mfu": t["mfu"],
            "mfu_causal": t["mfu_causal"],
            "tokens_per_second": t["tokens_per_second"],
        }


RULES = ("tp-in-node", "cp-long-only", "pp-when-needed")  # chapter 7's rules (distlab.planner.rules)


def candidates(m: ModelShape, c: Cluster, t: Training, rules=RULES):
    """Every plan that tiles the cluster and splits the global batch evenly (memory not checked yet), as
    chapter 7's rules allow (distlab.planner.rules): TP sizes that divide the heads, inside a node
    ("tp-in-node"); CP only from LONG_SEQ tokens ("cp-long-only"); pipelines only where a pipeline-free
    ZeRO-1 plan does not fit ("pp-when-needed"); ZeRO-0/1 with pipelines. Leaving a rule out of `rules`
    lifts it (to check that the rules drop no best plan)."""
    unknown = set(rules) - set(RULES)
    if unknown:
        raise ValueError(f"unknown rules {sorted(unknown)}; known: {', '.join(RULES)}")
    flash = t.attention == "flash"
    for tp in tensor_sizes(m, c, within_node="tp-in-node" in rules).value:
        for cp in context_sizes(m, c, t, tp, long_only="cp-long-only" in rules).value:
            for pp in pipeline_sizes(m, c, t, tp, cp, only_when_needed="pp-when-needed" in rules).value:
                dp = c.gpus // (tp * cp * pp)
                if t.sequences % dp:
                    continue
                per_replica = t.sequences // dp
                for b in (b for b in powers_of_two(min(per_replica, MAX_MICRO_BATCH)) if per_replica % b == 0):
                    n = per_replica // b
                    if pp > 1 and n < pp:
                        continue
                    group = dp * cp
                    for zero in zero_stages(pp, group).value:
                        for recompute in ("none", "full") if flash else ("none", "selective", "full"):
                            offloads = (
                                ["none"]
                                + (["optimizer"] if zero >= 1 else [])
                                + (["optimizer+params"] if zero == 3 else [])
                            )
                            for offload in offloads:
                                if group == 1 and zero > 0 and offload == "none":
                                    continue  # nothing to shard over: the same as zero 0
                                yield Plan(
                                    tp=tp,
                                    pp=pp,
                                    dp=dp,
                                    cp=cp,
                                    zero=zero,
                                    micro_batch=b,
                                    microbatches=n,
                                    recompute=recompute,
                                    offload=offload,
                                )


class NothingFits(ValueError):
    """No plan fits (or none divides the batch): the message says by how much."""


def search(
    m: ModelShape,
    c: Cluster,
    t: Training,
    *,
    where=None,
    gemm: float | None = None,
    mem_eff: float | None = None,
    rules=None,
) -> list[Estimate]:
    """Feasible plans, fastest first (ties: less memory); the first RESIMULATE with the simulated pipeline.
    `where(plan) -> bool` restricts the search (a published configuration, one ZeRO stage, ...). `rules`
    (see candidates): by default all of RULES, or all but "pp-when-needed" when `where` restricts the search
    (a restriction may ask about pipelines the rule would skip)."""
    budget = c.gpu.hbm_bytes * t.usable_fraction
    host_budget = c.host_bytes / c.gpus_per_node * t.usable_fraction  # offload: each GPU's share of its host
    fits, seen, least = [], 0, None
    for p in candidates(
        m,
        c,
        t,
        RULES
        if rules is None and where is None
        else tuple(r for r in RULES if r != "pp-when-needed")
        if rules is None
        else rules,
    ):
        if where is not None and not where(p):
            continue
        seen += 1
        mem = memory(m, c, t, p)
        need = device_bytes(mem)
        if least is None or need < least[0]:
            least = (need, p, mem["host"])
        if need <= budget and mem["host"] <= host_budget:
            fits.append(Estimate(p, mem, step(m, c, t, p, exact_pipeline=False, gemm=gemm, mem_eff=mem_eff)))
    if not seen:
        raise NothingFits(
            f"no plan splits a global batch of {t.sequences:,} sequences of {t.seq:,} tokens over "
            f"{c.gpus} GPUs evenly (data parallelism needs the sequences to divide); change the batch "
            "or the GPU count"
        )
    if not fits:
        host = (
            f" and {least[2] / 1e9:.0f} GB of host memory per GPU ({host_budget / 1e9:.0f} GB usable)"
            if least[2]
            else ""
        )
        raise NothingFits(
            f"nothing fits: the plan that needs the least GPU memory ({least[1].label()}) needs "
            f"{least[0] / 1e9:.1f} GB per GPU ({budget / 1e9:.1f} GB usable on a {c.gpu.name}){host}; "
            "add GPUs, shorten the sequence, or use a GPU with more memory"
        )
    key = lambda e: (round(e.step_seconds, 9), e.memory_bytes)
    fits.sort(key=key)
    head = [
        Estimate(e.plan, e.memory, step(m, c, t, e.plan, exact_pipeline=True, gemm=gemm, mem_eff=mem_eff))
        for e in fits[:RESIMULATE]
    ]
    return sorted(head, key=key) + fits[RESIMULATE:]


# ---------------------------------------------------------------- the winner in words
def _share(e: Estimate, *names: str) -> float:
    parts = e.time["parts"]
    return sum(v for k, v in parts.items() if any(k.startswith(n) or k.endswith(n) for n in names)) / e.step_seconds


def explain(m: ModelShape, c: Cluster, t: Training, ranked: list[Estimate]) -> list[str]:
    """Why the first plan of `ranked` is the one to run, for an engineer defending it."""
    best, p = ranked[0], ranked[0].plan
    budget = c.gpu.hbm_bytes * t.usable_fraction
    mem = best.memory
    out = [
        f"Fits: {best.memory_bytes / 1e9:.1f} GB of the {budget / 1e9:.0f} GB usable per GPU (weights "
        f"{mem['weights'] / 1e9:.1f}, gradients {mem['gradients'] / 1e9:.1f}, optimizer {mem['optimizer'] / 1e9:.1f}"
        f", activations {mem['activations'] / 1e9:.1f} GB)."
    ]
    rules = decisions(m, c, t, p)
    out.append(
        f"Searched under chapter 7's rules: {rules['tensor'].reason}; {rules['pipeline'].reason}; "
        f"{rules['context'].reason}."
    )
    if p.tp > 1:
        out.append(
            f"Tensor parallelism {p.tp} stays inside a {c.gpus_per_node}-GPU node; its all-reduces take "
            f"{_share(best, 'tensor-parallel'):.0%} of the step."
        )
    if p.pp > 1:
        out.append(
            f"{p.pp} pipeline stages with {p.microbatches} micro-batches each: the bubble is "
            f"{_share(best, 'pipeline bubble'):.0%} of the step."
        )
    if p.zero > 0:
        ddp = sum(memory(m, c, t, replace(p, zero=0, offload="none"))[k] for k in ("weights", "gradients", "optimizer"))
        verdict = "more than fits" if ddp + mem["activations"] > budget else "it would fit, but no faster"
        out.append(f"Without sharding (DDP) the model state alone would be {ddp / 1e9:.1f} GB per GPU: {verdict}.")
    zero = {
        0: "DDP (every GPU keeps all model state)",
        1: "ZeRO-1 (optimizer state sharded)",
        2: "ZeRO-2 (optimizer state and gradients sharded)",
        3: "ZeRO-3/FSDP (everything sharded)",
    }[p.zero]
    out.append(
        f"Data parallelism {p.dp * p.cp} with {zero}: its communication leaves "
        f"{_share(best, 'data-parallel (exposed)'):.1%} of the step exposed."
    )
    out.append(
        f"Micro-batch of {p.micro_batch} sequence(s), {p.microbatches} accumulated per step: "
        f"{p.micro_batch * p.microbatches * p.dp} sequences = {t.global_batch_tokens:,} tokens per step."
    )
    if p.recompute != "none":
        out.append(
            f"{p.recompute.capitalize()} recomputation costs {_share(best, 'recompute'):.0%} of the step; "
            "without it the activations would not fit, or fit only with a slower plan."
        )
    if p.offload != "none":
        out.append(
            f"Offloading the {p.offload} to the host is what makes it fit; the update then costs "
            f"{_share(best, 'optimizer'):.0%} of the step."
        )
    out.append(
        f"Step {best.step_seconds:.3g} s: matmuls {_share(best, 'matmul'):.0%}, memory-bound kernels "
        f"{_share(best, 'memory-bound'):.0%}; MFU {best.time['mfu']:.1%}, "
        f"{best.time['tokens_per_second']:,.0f} tokens/s."
    )
    if best.time["mfu"] > 1.05 * best.time["mfu_causal"]:
        out.append(
            "MFU counts attention over all s x s scores (6N + 12Lhs, as published figures do); a causal "
            "model needs only the unmasked half, the half FlashAttention computes. Counting only that half "
            f"(6N + 6Lhs): {best.time['mfu_causal']:.1%}."
        )
    if len(ranked) > 1:
        nxt = ranked[1]
        diff = {
            k: nxt.time["parts"].get(k, 0.0) - best.time["parts"].get(k, 0.0)
            for k in set(nxt.time["parts"]) | set(best.time["parts"])
        }
        worst = max(diff, key=diff.get)
        slower = nxt.step_seconds / best.step_seconds - 1
        why = (
            f"mostly {worst}"
            if slower >= 0.005
            else f"a tie on time; this plan needs {(nxt.memory_bytes - best.memory_bytes) / 1e9:+.1f} GB per GPU"
        )
        out.append(f"Runner-up: {nxt.plan.label()}, {slower:.1%} slower ({why}).")
    return out


# ---------------------------------------------------------------- the `plan` command
def request(args) -> tuple[ModelShape, Cluster, Training]:
    m = model(args.model)
    c = cluster(args.gpu, gpus_per_node=args.gpus_per_node, nodes=args.nodes, intra=args.intra_bw, inter=args.inter_bw)
    seq = args.seq or m.seq
    default = PRETRAIN_BATCH_TOKENS if args.task == "pretrain" else finetune_batch_sequences() * seq
    t = Training(
        global_batch_tokens=args.global_batch_tokens or default,
        seq=seq,
        precision=args.precision,
        optimizer=args.optimizer,
        task=args.task,
        attention=args.attention,
    )
    return m, c, t


def finetune_batch_sequences() -> int:
    """Llama 2-Chat's supervised fine-tune used 64 sequences per step (distlab/data/scaling_laws.toml)."""
    from distlab.core.facts import value

    return value("scaling_laws.Llama2-SFT.batch_sequences")


@command("plan", "parallelism plans that fit a model on a cluster: memory, step time and MFU, best first")
def plan_command(argv: list[str]) -> int:
    p = parser(
        "plan",
        "Enumerate the plans (DP, TP, PP, CP, ZeRO stage, micro-batch, recompute, offload) that\n"
        "fit a model on a cluster, time each with distlab's cost model, and rank them by step time.\n"
        "Memory per GPU by category; step time by cause; MFU against the GPU's dense bf16 peak.",
    )
    p.add_argument("--model", required=True, help="preset (1B, 7B, 13B, 70B, 175B) or a JSON file of the shape")
    p.add_argument("--gpu", default="H100-SXM", help="accelerator (see `distlab gpus`; default H100-SXM)")
    p.add_argument("--gpus-per-node", type=positive(int, 1024), default=8, help="GPUs per node (default 8)")
    p.add_argument("--nodes", type=positive(int, MAX_GPUS), default=1, help="nodes (default 1)")
    p.add_argument(
        "--intra-bw",
        default=None,
        help="link inside a node: a name from interconnect.toml or GB/s per direction (default: the GPU's NVLink)",
    )
    p.add_argument(
        "--inter-bw",
        default="InfiniBand-NDR",
        help="link per GPU between nodes: a name or GB/s per direction (default InfiniBand-NDR, 50 GB/s)",
    )
    p.add_argument(
        "--global-batch-tokens",
        type=positive(int),
        default=None,
        help="tokens per optimizer step (default: 4M for pretrain, 64 sequences for finetune)",
    )
    p.add_argument("--seq", type=positive(int, MAX_TOKENS), default=None, help="sequence length (default: the model's)")
    p.add_argument("--precision", choices=PRECISIONS, default="mixed", help="mixed (bf16 + fp32 master) or fp32")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw")
    p.add_argument("--task", choices=TASKS, default="pretrain", help="pretrain or finetune (a full fine-tune)")
    p.add_argument("--attention", choices=ATTENTION, default="flash")
    p.add_argument("--top", type=positive(int, 10_000), default=5, help="how many plans to print (default 5)")
    p.add_argument("--json", action="store_true", help="machine-readable: a list of plans, best first")
    args = p.parse_args(argv)
    m, c, t = request(args)
    ranked = search(m, c, t)
    reasons = explain(m, c, t, ranked)
    plans = [e.to_dict() for e in ranked[: args.top]]
    plans[0]["reasons"] = reasons
    lines = [
        f"{m.name} ({m.params() / 1e9:.2f}B parameters), {t.task}, {t.global_batch_tokens:,} tokens per step "
        f"of {t.seq:,}-token sequences, on {c.describe()}",
        f"{len(ranked)} plans fit; the best {len(plans)}:",
        "",
    ]
    lines += [
        f"{i}. {e.plan.label()}\n   {e.memory_bytes / 1e9:.1f} GB/GPU, step {e.step_seconds:.3g} s, MFU "
        f"{e.time['mfu']:.1%}, {e.time['tokens_per_second']:,.0f} tokens/s"
        for i, e in enumerate(ranked[: args.top], 1)
    ]
    lines += ["", "Why the first:"] + [f"  - {r}" for r in reasons]
    emit(plans, args.json, "\n".join(lines))
    return 0
