"""ZeRO-1 written out on real processes: each rank owns 1/N of the AdamW state (Rajbhandari et al. 2020,
"ZeRO", https://arxiv.org/abs/1910.02054, Section 5.1, P_os).

One step, per rank:
    1. forward and backward on the rank's slice of the global batch (full gradients, as in DDP);
    2. reduce-scatter the flat gradient: the rank receives the sum over ranks of its own shard only;
    3. AdamW on that shard (the rank's slice of the parameters, and m and v for it alone);
    4. all-gather the updated shards, so every rank holds the full parameters again.

Remainder rule: the flat parameter vector of Ψ elements is padded with zeros to N·⌈Ψ/N⌉, and rank r owns
elements [r⌈Ψ/N⌉, (r+1)⌈Ψ/N⌉): every rank's shard and state has ⌈Ψ/N⌉ elements, the last one ending in
at most N - 1 padding zeros (zero gradient, zero weight: AdamW leaves them at zero).

`Zero1AdamW(naive=True)` is the version first written down: all-reduce the whole gradient and keep one's
shard, which moves 1.5x the bytes of reduce-scatter (two ring phases instead of one). The experiment runs
both, and torch's DDP, on the same batches and checks all three against one process on the global batch.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.models.gpt import GPTConfig, param_count
from distlab.runtime.comm_counter import CommCounter
from distlab.runtime.launcher import launch
from distlab.sharding.equivalence import (
    ADAMW,
    CFG,
    PER_RANK_BATCH,
    STEPS,
    _params_vector,
    equivalence_claims,
    fp32_tolerance,
    global_batch,
    seeded_model,
    single_process,
    world_for,
)
from distlab.sharding.zero import shard_elements, traffic_bytes_per_gpu

WORLD = 3


def all_gather_flat(output: torch.Tensor, shard: torch.Tensor, group=None) -> None:
    """output = concat over ranks of `shard` (all_gather_single in torch >= 2.13, older name before)."""
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    fn(output, shard, group=group)


def reduce_scatter_flat(output: torch.Tensor, full: torch.Tensor, group=None) -> None:
    """output = sum over ranks of this rank's chunk of `full` (reduce_scatter_single in torch >= 2.13)."""
    fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    fn(output, full, group=group)


def flat_padded(tensors, length: int) -> torch.Tensor:
    """The tensors flattened into one fp32 vector, zero-padded to `length`."""
    tensors = list(tensors)
    out = torch.zeros(length, dtype=torch.float32, device=tensors[0].device)
    torch.cat([t.detach().reshape(-1).float() for t in tensors], out=out[: sum(t.numel() for t in tensors)])
    return out


class Zero1AdamW:
    """AdamW whose state lives only for this rank's ⌈Ψ/N⌉ elements of the flat parameter vector."""

    def __init__(self, params, *, group=None, naive: bool = False, **adamw):
        self.params = list(params)
        self.group, self.naive = group, naive
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.numel = sum(p.numel() for p in self.params)
        self.shard = shard_elements(self.numel, self.world)
        self.start = self.rank * self.shard
        owned = flat_padded(self.params, self.shard * self.world)[self.start : self.start + self.shard]
        self.owned = torch.nn.Parameter(owned.clone())  # the rank's fp32 master shard
        self.opt = torch.optim.AdamW([self.owned], **adamw)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        padded = self.shard * self.world
        grads = flat_padded((p.grad for p in self.params), padded)  # (N·⌈Ψ/N⌉,)
        if self.naive:
            dist.all_reduce(grads, group=self.group)
            mine = grads[self.start : self.start + self.shard].clone()
        else:
            mine = torch.empty(self.shard, dtype=torch.float32, device=grads.device)
            reduce_scatter_flat(mine, grads, self.group)  # (⌈Ψ/N⌉,): the sum of this shard over ranks
        self.owned.grad = mine.div_(self.world)  # mean over ranks = gradient of the global-batch mean loss
        self.opt.step()
        full = torch.empty(padded, dtype=torch.float32, device=grads.device)
        all_gather_flat(full, self.owned.detach(), self.group)
        offset = 0
        for p in self.params:
            p.copy_(full[offset : offset + p.numel()].view_as(p))
            offset += p.numel()

    def state_bytes(self) -> dict[str, int]:
        """Bytes of this rank's optimizer state, measured from the tensors' storage."""
        st = self.opt.state[self.owned]
        return {
            "m_v": sum(st[k].untyped_storage().nbytes() for k in ("exp_avg", "exp_avg_sq")),
            "master": self.owned.untyped_storage().nbytes(),
            "step": st["step"].untyped_storage().nbytes(),
        }


def zero1_rank(rank: int, world: int, device: str, cfg: GPTConfig = CFG, steps: int = STEPS) -> dict:
    """Runs ZeRO-1, naive ZeRO-1 and torch DDP for `steps` steps each, counting the collectives of each.
    Returns per variant the final parameters, the collectives and the bytes sent per step; for ZeRO-1 also
    the rank's optimizer-state bytes and its owned shard."""
    dev = f"cuda:{torch.cuda.current_device()}" if device == "cuda" else "cpu"
    out = {}
    for variant in ("zero1", "naive", "ddp"):
        model = seeded_model(cfg, dev)
        if variant == "ddp":
            net = torch.nn.parallel.DistributedDataParallel(model)
            opt = torch.optim.AdamW(model.parameters(), **ADAMW)
        else:
            net, opt = model, Zero1AdamW(model.parameters(), naive=variant == "naive", **ADAMW)
        with CommCounter(world) as comm:
            for step in range(steps):
                x, y = global_batch(cfg, step, world, dev)
                mine = slice(rank * PER_RANK_BATCH, (rank + 1) * PER_RANK_BATCH)
                opt.zero_grad()
                net(x[mine], y[mine]).backward()
                opt.step()
        # Gradient and parameter traffic; DDP also broadcasts its bucket order once (a few bytes, not counted).
        sent = sum(comm.sent_bytes(op) for op in ("all-reduce", "reduce-scatter", "all-gather"))
        out[variant] = {"params": _params_vector(model), "comm": comm.summary(), "sent_per_step": sent / steps}
        if variant == "zero1":
            out["state"] = opt.state_bytes()
            out["owned"] = opt.owned.detach().cpu().clone()
    return out


@experiment("zero1-emulation", "ZeRO-1 on real processes: reduce-scatter, update the owned shard, all-gather")
def zero1_emulation(device: str) -> Result:
    r = Result("zero1-emulation")
    world = world_for(device, "zero1-emulation", WORLD)
    n = param_count(CFG)
    ranks = launch(zero1_rank, world, device, device=device, timeout_s=300)
    ref = single_process(device, world)
    shard = shard_elements(n, world)
    r.add("world", world, "ranks", "data-parallel ranks")
    r.add("params", n, "params", "model parameters Ψ")
    r.add("shard", shard, "params", "⌈Ψ/N⌉ elements owned per rank")
    r.add("padding", shard * world - n, "params", "padding elements on the last rank")
    r.add("steps", STEPS, "", "AdamW steps")
    r.add("lr", ADAMW["lr"], "", "AdamW learning rate")
    r.add("global_batch", PER_RANK_BATCH * world, "sequences", "global batch")
    r.add("max_abs_param", ref["max_abs_param"], "", "largest |parameter|")
    r.add("key_bias_grad_ratio", ref["key_bias_grad_ratio"], "", "max |key-bias grad| / max |query-bias grad|")
    r.claim(
        "key-bias gradient is rounding noise",
        ref["key_bias_grad_ratio"],
        1e-4,
        relation="<=",
        formula="max |∂L/∂b_k| / max |∂L/∂b_q| (zero in exact arithmetic)",
    )
    tol = fp32_tolerance(ref, device)
    r.add("tolerance", tol, "", "tolerance on max |Δparam|")
    rows = []
    for variant, label in (
        ("zero1", "ZeRO-1 (reduce-scatter)"),
        ("naive", "ZeRO-1 naive (all-reduce)"),
        ("ddp", "torch DDP"),
    ):
        diff = equivalence_claims(r, label, variant, [x[variant]["params"] for x in ranks], ref, tol)
        sent = ranks[0][variant]["sent_per_step"]
        rows.append([label, _ops(ranks[0][variant]["comm"]), round(sent), diff])
        r.add(f"{variant}_sent_bytes", sent, "B", f"{label}: bytes sent per rank per step")
    r.table(
        "variants",
        [
            "variant",
            "collectives per step (calls, message)",
            "bytes sent per rank per step",
            "max abs Δparam vs one process (key biases apart)",
        ],
        rows,
        caption=f"{world} ranks, {STEPS} AdamW steps, fp32 gradients (4 bytes per element)",
    )
    _traffic_claims(r, ranks[0], n, world)
    _state_claims(r, ranks, ref["mv_bytes"], n, shard, world)
    return r


def _ops(comm: dict) -> str:
    return ", ".join(
        f"{op} {v['calls'] // STEPS}x {v['message_bytes'] // STEPS:,} B" for op, v in comm.items() if op != "broadcast"
    )


def _traffic_claims(r: Result, rank0: dict, n: int, world: int) -> None:
    ddp, z1, naive = (rank0[v]["sent_per_step"] for v in ("ddp", "zero1", "naive"))
    padded = world * shard_elements(n, world)
    r.claim(
        "ZeRO-1 bytes sent per rank per step = formula",
        z1,
        traffic_bytes_per_gpu(n, world, 1, bytes_per_elem=4)["total_bytes"],
        rel_tol=1e-12,
        unit="B",
        formula="2 (N-1) ⌈Ψ/N⌉ · 4 B: reduce-scatter + all-gather of the padded buffer",
    )
    r.claim(
        "DDP bytes sent per rank per step = formula",
        ddp,
        2 * (world - 1) / world * 4 * n,
        rel_tol=1e-12,
        unit="B",
        formula="2 (N-1)/N · 4Ψ: one ring all-reduce, no padding",
    )
    r.claim("ZeRO-1 / DDP bytes sent", z1 / ddp, padded / n, rel_tol=1e-12, formula="N⌈Ψ/N⌉/Ψ: 1, but for the padding")
    r.claim(
        "naive ZeRO-1 / DDP bytes sent",
        naive / ddp,
        1.5 * padded / n,
        rel_tol=1e-12,
        formula="all-reduce + all-gather = 3 ring phases vs 2 (times the padding)",
    )
    r.add("z1_over_ddp", z1 / ddp, "", "ZeRO-1 / DDP traffic")
    r.add("naive_over_ddp", naive / ddp, "", "naive ZeRO-1 / DDP traffic")


def _state_claims(r: Result, ranks: list, ref_mv: int, n: int, shard: int, world: int) -> None:
    per_rank = [x["state"]["m_v"] for x in ranks]
    rows = [[i, s, s / ref_mv] for i, s in enumerate(per_rank)] + [["one process", ref_mv, 1.0]]
    r.table(
        "state",
        ["rank", "Adam m + v bytes", "share of one process"],
        rows,
        caption="measured from the optimizer's tensors after the run",
    )
    r.add("single_mv_bytes", ref_mv, "B", "one process: Adam m + v bytes")
    r.add("rank_mv_bytes", per_rank[0], "B", "per rank: Adam m + v bytes")
    r.add("rank_share", per_rank[0] / ref_mv, "fraction", "per-rank state / one process's")
    r.add("master_bytes", ranks[0]["state"]["master"], "B", "per rank: fp32 master shard")
    r.claim("one process: m + v bytes = 8Ψ", ref_mv, 8 * n, unit="B", formula="2 x 4 B x Ψ")
    for i, s in enumerate(per_rank):
        r.claim(f"rank {i}: m + v bytes = 8⌈Ψ/N⌉", s, 8 * shard, unit="B", formula=f"⌈{n:,}/{world}⌉ = {shard:,}")
    r.claim(
        "per-rank state / one process's",
        per_rank[0] / ref_mv,
        shard / n,
        rel_tol=1e-12,
        formula=f"⌈Ψ/N⌉/Ψ = 1/N + padding/(NΨ), N = {world}",
    )
