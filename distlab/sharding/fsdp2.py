"""PyTorch FSDP2 (`fully_shard`, ZeRO-3) on real processes, checked against one process.

FSDP2 shards every parameter on its first dimension across the mesh (a DTensor whose local piece is
⌈dim0/N⌉ rows, padded), all-gathers a module's parameters before its forward and again before its
backward, and reduce-scatters its gradients after: ZeRO-3's 2 all-gathers + 1 reduce-scatter = 3Ψ.
We shard the embeddings, every block and the head separately, so the root owns no parameters (FSDP2 keeps
the root's parameters gathered between forward and backward, which would hide one all-gather).

The experiment trains the same model from the same seed on the same global batch three ways on N ranks
(torch DDP, FSDP2 in fp32, FSDP2 with a bf16 MixedPrecisionPolicy) and in one process (fp32, and bf16
compute with fp32 master weights), counts every collective (distlab.runtime.comm_counter) and measures the bytes
each rank holds.
"""

from __future__ import annotations

import copy
import math

import torch

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.models.gpt import GPT, GPTConfig, param_count
from distlab.runtime.comm_counter import CommCounter
from distlab.runtime.launcher import launch
from distlab.sharding.equivalence import (
    ADAMW,
    PER_RANK_BATCH,
    STEPS,
    bias_masks,
    equivalence_claims,
    fp32_tolerance,
    global_batch,
    seeded_model,
    world_for,
)

CFG = GPTConfig(tie_embeddings=False)  # every first dimension is even: 2 ranks shard without padding
WORLD = 2
VARIANTS = ("ddp", "fp32", "bf16")


def shard_model(model: GPT, mesh, mp_policy=None, **knobs) -> GPT:
    """fully_shard the embeddings, each block, the final norm and the head, then the (parameterless) root.
    `knobs`: further fully_shard arguments (reshard_after_forward; distlab.sharding.fsdp2_knobs varies them);
    a 2-D mesh (replicate, shard) makes it HSDP."""
    from torch.distributed.fsdp import fully_shard

    kwargs = {"mesh": mesh} | ({"mp_policy": mp_policy} if mp_policy is not None else {}) | knobs
    for module in sharded_modules(model):
        fully_shard(module, **kwargs)
    fully_shard(model, **kwargs)
    return model


def sharded_modules(model: GPT) -> list:
    """The modules shard_model shards, in forward order."""
    return [model.tok, model.pos, *model.blocks, model.ln_f, model.head]


def _local_bytes(tensors) -> int:
    """Bytes of this rank's pieces (a DTensor's local shard, or the whole tensor)."""
    total = 0
    for t in tensors:
        t = t.to_local() if hasattr(t, "to_local") else t
        total += t.numel() * t.element_size()
    return total


def fsdp2_rank(
    rank: int, world: int, device: str, cfg: GPTConfig = CFG, steps: int = STEPS, variants: tuple[str, ...] = VARIANTS
) -> dict:
    """DDP and FSDP2 (fp32, bf16 mixed precision) for `steps` AdamW steps each: per variant the collectives,
    the bytes sent per step, this rank's local parameter, gradient and optimizer-state bytes, the local
    byte count of every parameter, and the full final parameters."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy

    dev = f"cuda:{torch.cuda.current_device()}" if device == "cuda" else "cpu"
    mesh = init_device_mesh(device, (world,))
    out = {}
    for variant in variants:
        model = seeded_model(cfg, dev)
        if variant == "ddp":
            net = torch.nn.parallel.DistributedDataParallel(model)
        else:
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16) if variant == "bf16" else None
            net = shard_model(model, mesh, mp)
        opt = torch.optim.AdamW(model.parameters(), **ADAMW)  # built after sharding: its state is sharded too
        mine = slice(rank * PER_RANK_BATCH, (rank + 1) * PER_RANK_BATCH)
        with CommCounter(world) as comm:
            for step in range(steps):
                x, y = global_batch(cfg, step, world, dev)
                opt.zero_grad()
                net(x[mine], y[mine]).backward()
                opt.step()
        params = list(model.parameters())
        state = [opt.state[p][k] for p in params for k in ("exp_avg", "exp_avg_sq")]
        out[variant] = {
            "comm": comm.summary(),
            "sent_per_step": sum(comm.sent_bytes(op) for op in ("all-reduce", "reduce-scatter", "all-gather")) / steps,
            "param_bytes": _local_bytes(params),
            "grad_bytes": _local_bytes(p.grad for p in params),
            "state_bytes": _local_bytes(state),
            "per_param_bytes": [_local_bytes([p]) for p in params],
            "params": torch.cat(
                [(p.full_tensor() if hasattr(p, "full_tensor") else p).detach().reshape(-1).cpu() for p in params]
            ),
        }
    return out


def single_process(device: str, world: int, bf16: bool, cfg: GPTConfig = CFG, steps: int = STEPS) -> dict:
    """One process on the global batch: fp32, or bf16 forward/backward with fp32 master weights and AdamW."""
    model = seeded_model(cfg, device)
    opt = torch.optim.AdamW(model.parameters(), **ADAMW)
    for step in range(steps):
        x, y = global_batch(cfg, step, world, device)
        opt.zero_grad(set_to_none=True)
        if bf16:
            low = copy.deepcopy(model).to(torch.bfloat16)
            low(x, y).backward()
            for p, q in zip(model.parameters(), low.parameters()):
                p.grad = q.grad.float()
        else:
            model(x, y).backward()
        opt.step()
    params = torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])
    return {"params": params, "key": bias_masks(model)["key"], "max_abs_param": float(params.abs().max())}


def _relative_update_error(params: torch.Tensor, ref: torch.Tensor, start: torch.Tensor) -> float:
    """||(p - p0) - (p_ref - p0)|| / ||p_ref - p0||: the error of the whole update, as a fraction of it."""
    return float((params - ref).norm() / (ref - start).norm())


def update_error_f64(params: torch.Tensor, ref: torch.Tensor, start: torch.Tensor) -> float:
    """The same relative update error re-derived in float64: sqrt(Σ(p - p_ref)² / Σ(p_ref - p0)²)."""
    p, q, s = (t.to(torch.float64) for t in (params, ref, start))
    return math.sqrt(float(((p - q) ** 2).sum()) / float(((q - s) ** 2).sum()))


def collectives_by_hand(n: int, blocks: int) -> dict[str, str]:
    """The traffic table's collectives per step, counted by hand: DDP all-reduces its one bucket (4Ψ bytes); FSDP2
    shards tok, pos, each block, ln_f and head (blocks + 4 modules), all-gathers each twice (forward, backward:
    2 x 4Ψ bytes gathered) and reduce-scatters each once (4Ψ); bf16 moves 2 bytes per element."""
    modules = blocks + 4
    return {
        "ddp": f"all-reduce 1x {4 * n:,} B",
        "fp32": f"all-gather {2 * modules}x {8 * n:,} B, reduce-scatter {modules}x {4 * n:,} B",
        "bf16": f"all-gather {2 * modules}x {4 * n:,} B, reduce-scatter {modules}x {2 * n:,} B",
    }


@experiment("fsdp2-equivalence", "PyTorch FSDP2 (fully_shard) on gloo ranks vs one process: parameters, bytes, traffic")
def fsdp2_equivalence(device: str) -> Result:
    r = Result("fsdp2-equivalence")
    world = world_for(device, "fsdp2-equivalence", WORLD)
    n = param_count(CFG)
    ranks = launch(fsdp2_rank, world, device, device=device, timeout_s=300)
    ref = single_process(device, world, bf16=False)
    ref_bf16 = single_process(device, world, bf16=True)
    start = torch.cat([p.detach().reshape(-1) for p in seeded_model(CFG, "cpu").parameters()])
    r.add("world", world, "ranks", "ranks (one FSDP2 mesh dimension)")
    r.add("params", n, "params", "model parameters Ψ (untied head)")
    r.add("steps", STEPS, "", "AdamW steps")
    tol = fp32_tolerance(ref, device)  # summation order only (see zero1-emulation)
    r.add("tolerance", tol, "", "tolerance on max |Δparam|")
    ulp = 2.0**-23 * ref["max_abs_param"]  # one fp32 ulp (23 fraction bits) of the largest weight
    r.claim("tolerance = 16 ulps of the largest weight (1600 on GPUs)", tol, (16 if device == "cpu" else 1600) * ulp)
    for variant, label in (("ddp", "torch DDP (FSDP2's model)"), ("fp32", "FSDP2 fp32")):
        equivalence_claims(r, label, variant, [x[variant]["params"] for x in ranks], ref, tol)
    _bf16(r, ranks, ref, ref_bf16, start)
    _bytes(r, ranks, n, world)
    _traffic(r, ranks[0], n, world)
    return r


def _bf16(r: Result, ranks: list, ref: dict, ref_bf16: dict, start: torch.Tensor) -> None:
    """bf16 mixed precision: FSDP2's error against fp32 is that of one process doing the same in bf16."""
    err = {
        "fp32": max(_relative_update_error(x["fp32"]["params"], ref["params"], start) for x in ranks),
        "bf16": max(_relative_update_error(x["bf16"]["params"], ref["params"], start) for x in ranks),
        "single_bf16": _relative_update_error(ref_bf16["params"], ref["params"], start),
    }
    rows = [
        ["FSDP2 fp32 vs one process fp32", err["fp32"]],
        ["FSDP2 bf16 MixedPrecisionPolicy vs one process fp32", err["bf16"]],
        ["one process, bf16 compute + fp32 master, vs one process fp32", err["single_bf16"]],
    ]
    r.table(
        "precision",
        ["run", "relative error of the parameter update"],
        rows,
        caption="‖Δ - Δ_ref‖ / ‖Δ_ref‖ over all parameters, Δ = final - initial parameters",
    )
    for k, v in err.items():
        r.add(f"update_error_{k}", v, "", f"relative update error: {k}")
    f64 = {
        "fp32": max(update_error_f64(x["fp32"]["params"], ref["params"], start) for x in ranks),
        "bf16": max(update_error_f64(x["bf16"]["params"], ref["params"], start) for x in ranks),
        "single_bf16": update_error_f64(ref_bf16["params"], ref["params"], start),
    }
    r.claim(
        "precision errors = float64 (largest miss)",
        max(abs(err[k] - f64[k]) / f64[k] if f64[k] else err[k] for k in err),
        0.0,
        abs_tol=5e-5,
        formula="sqrt(Σ(p - p_ref)² / Σ(p_ref - p0)²) in float64; fp32 norms miss it by ~1.5e-5, below 4 digits",
    )
    r.claim(
        "FSDP2 bf16 error <= 2 x one process's own bf16 error",
        err["bf16"],
        2 * err["single_bf16"],
        relation="<=",
        formula="bf16 rounding, not sharding, sets the error",
    )
    r.claim(
        "bf16 error is at bf16 level: >= 100 x the fp32 error",
        err["bf16"],
        100 * err["fp32"],
        relation=">=",
        formula="bf16 keeps 8 bits of mantissa, fp32 24",
    )


def _bytes(r: Result, ranks: list, n: int, world: int) -> None:
    rows = []
    for i, x in enumerate(ranks):
        f = x["fp32"]
        rows.append([i, f["param_bytes"], f["grad_bytes"], f["state_bytes"]])
        for what, per in (("param", 4), ("grad", 4), ("state", 8)):
            r.claim(
                f"rank {i}: FSDP2 local {what} bytes = {per}Ψ/N",
                f[f"{what}_bytes"],
                per * n // world,
                unit="B",
                formula=f"{per} B x {n:,} / {world} (every first dimension divides by {world})",
            )
    d = ranks[0]["ddp"]
    rows.append(["DDP (each rank)", d["param_bytes"], d["grad_bytes"], d["state_bytes"]])
    r.table(
        "bytes",
        ["rank", "parameters (local)", "gradients (local)", "Adam m + v (local)"],
        rows,
        caption="FSDP2 fp32 after the run: bytes of each rank's local shards, measured from the tensors",
    )
    r.add(
        "fsdp_state_share",
        ranks[0]["fp32"]["state_bytes"] / d["state_bytes"],
        "fraction",
        "FSDP2 optimizer state per rank / DDP's",
    )
    r.claim(
        "FSDP2 Adam state per rank / DDP's = 1/N",
        r.quantities["fsdp_state_share"].value,
        1 / world,
        rel_tol=1e-12,
        formula="8Ψ/N against DDP's 8Ψ",
    )


def _traffic(r: Result, rank0: dict, n: int, world: int) -> None:
    sent = {v: rank0[v]["sent_per_step"] for v in VARIANTS}
    rows = [
        [
            label,
            ", ".join(
                f"{op} {s['calls'] // STEPS}x {s['message_bytes'] // STEPS:,} B"
                for op, s in rank0[v]["comm"].items()
                if op != "broadcast"
            ),
            round(sent[v]),
        ]
        for v, label in (("ddp", "torch DDP (fp32)"), ("fp32", "FSDP2 fp32"), ("bf16", "FSDP2 bf16"))
    ]
    r.table(
        "traffic",
        ["run", "collectives per step (calls, message)", "bytes sent per rank per step"],
        rows,
        caption=f"counted by distlab.runtime.comm_counter on rank 0 of {world}",
    )
    hand = collectives_by_hand(n, CFG.layers)
    r.claim("traffic: collectives = hand count", sum(row[1] != hand[v] for row, v in zip(rows, hand, strict=True)), 0)
    # DDP's buckets: the first holds up to 1 MiB of gradients, the rest bucket_cap_mb = 25 MiB each (torch's
    # DistributedDataParallel); gradients that fit the first are all-reduced in one call per step
    first_bucket = 1024 * 1024
    r.claim("DDP's 4Ψ gradients fit its first bucket", 4 * n, first_bucket, relation="<=", unit="B")
    factor = (world - 1) / world
    for v in VARIANTS:
        r.add(f"{v}_sent_bytes", sent[v], "B", f"{v}: bytes sent per rank per step")
    r.claim(
        "FSDP2 fp32 bytes sent per step",
        sent["fp32"],
        3 * factor * 4 * n,
        rel_tol=1e-12,
        unit="B",
        formula="3 (N-1)/N · 4Ψ: all-gather twice, reduce-scatter once",
    )
    r.add("zero3_over_ddp", sent["fp32"] / sent["ddp"], "", "measured ZeRO-3 / DDP traffic")
    ratio = r.quantities["zero3_over_ddp"].value
    r.claim("FSDP2 (ZeRO-3) / DDP bytes sent", ratio, 1.5, rel_tol=1e-12, formula="3Ψ / 2Ψ")
    r.claim(
        "FSDP2 bf16 / fp32 bytes sent",
        sent["bf16"] / sent["fp32"],
        0.5,
        rel_tol=1e-12,
        formula="bf16 all-gathers and reduce-scatters: 2 bytes per element, not 4",
    )
