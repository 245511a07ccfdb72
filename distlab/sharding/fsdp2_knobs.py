"""FSDP2's knobs on real gloo processes: what each one does to the bytes moved and the memory held, and proof
that none of them changes the training (the same parameters as one process on the global batch).

- `reshard_after_forward=True` (ZeRO-3): free the gathered parameters after forward, all-gather them again for
  backward: 2 all-gathers + 1 reduce-scatter per step.
- `False` (ZeRO-2-like): keep them gathered until backward: one all-gather fewer, the whole model unsharded at
  the peak.
- an int k (a divisor of the shard group): after forward keep them sharded over k ranks only (a node), so the
  backward all-gather runs inside groups of k: cheaper wire, 1/k of the parameters held between the passes.
- explicit prefetch (`set_modules_to_forward_prefetch`, `set_modules_to_backward_prefetch`): issue the next
  module's all-gather before the current module computes, so on a GPU it overlaps; the price is one more
  module's parameters gathered at once.
- HSDP (a 2-D mesh, replicate x shard): shard inside a group, replicate across groups: all-gathers and
  reduce-scatters inside the shard group, one all-reduce of the shard across replicas.
- `MixedPrecisionPolicy(reduce_dtype=...)`: the dtype of the gradient reduce-scatter (bf16 halves its bytes).

Memory is measured with PyTorch's FSDPMemTracker (torch.distributed._tools.fsdp2_mem_tracker: it tags every
tensor FSDP2 makes as sharded or unsharded parameter, gradient, optimizer state, activation); bytes with
distlab.runtime.comm_counter. World 4, the model of distlab.sharding.fsdp2.
"""

from __future__ import annotations

import torch

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.models.gpt import GPTConfig, param_count
from distlab.runtime.comm_counter import CommCounter
from distlab.runtime.launcher import launch
from distlab.sharding.equivalence import ADAMW, PER_RANK_BATCH, equivalence_claims, fp32_tolerance, global_batch
from distlab.sharding.equivalence import seeded_model as seeded
from distlab.sharding.fsdp2 import CFG, shard_model, sharded_modules, single_process

WORLD = 4
STEPS = 3  # as equivalence_claims' Adam bound assumes
KNOBS = {  # name -> (reshard_after_forward, explicit prefetch, HSDP mesh, reduce dtype or None for fp32 training)
    "reshard=True": (True, False, False, None),
    "reshard=False": (False, False, False, None),
    "reshard=2": (2, False, False, None),
    "prefetch": (True, True, False, None),
    "HSDP 2x2": (True, False, True, None),
    "bf16, reduce fp32": (True, False, False, "fp32"),
    "bf16, reduce bf16": (True, False, False, "bf16"),
}


def _by_category(snapshot: dict, device: str) -> dict[str, int]:
    dev = next((d for d in snapshot if str(d).startswith(device)), None)
    return {str(getattr(k, "value", k)): int(v) for k, v in snapshot.get(dev, {}).items()}


def _peak(tracker, device: str) -> dict[str, int]:
    """Per FSDPMemTracker category (names as PyTorch prints them), the most bytes it held in any snapshot the
    tracker took around each module's forward and backward (not only at the moment of the global peak)."""
    peak: dict[str, int] = {}
    snaps = [tracker.get_tracker_snapshot("peak")]
    snaps += [x for stat in tracker.memory_tracking.values() for lst in stat.snapshots.values() for x in lst]
    for snap in snaps:
        for k, v in _by_category(snap, device).items():
            peak[k] = max(peak.get(k, 0), v)
    return peak


def knobs_rank(rank: int, world: int, device: str, cfg: GPTConfig = CFG, steps: int = STEPS) -> dict:
    """Every knob in turn on one world: per knob the collectives in order (with a marker where backward
    starts and where each sharded module's forward starts), peak memory per category, final parameters."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy

    torch.set_num_threads(1)
    dev = f"cuda:{torch.cuda.current_device()}" if device == "cuda" else "cpu"
    flat = init_device_mesh(device, (world,))
    mesh_2d = init_device_mesh(device, (2, world // 2), mesh_dim_names=("replicate", "shard"))
    out = {}
    for name, (reshard, prefetch, hsdp, reduce) in KNOBS.items():
        model = seeded(cfg, dev)
        mp = None
        if reduce is not None:
            mp = MixedPrecisionPolicy(
                param_dtype=torch.bfloat16, reduce_dtype=torch.float32 if reduce == "fp32" else torch.bfloat16
            )
        shard_model(model, mesh_2d if hsdp else flat, mp, reshard_after_forward=reshard)
        mods = sharded_modules(model)
        if prefetch:
            for a, b in zip(mods, mods[1:]):
                a.set_modules_to_forward_prefetch([b])
                b.set_modules_to_backward_prefetch([a])
        opt = torch.optim.AdamW(model.parameters(), **ADAMW)
        mine = slice(rank * PER_RANK_BATCH, (rank + 1) * PER_RANK_BATCH)
        with CommCounter(world) as comm:
            hooks = [
                m.register_forward_pre_hook(lambda *_, i=i: comm.log.append(("forward", i))) for i, m in enumerate(mods)
            ]
            with FSDPMemTracker(model, opt) as tracker:
                for step in range(steps):
                    comm.log.append(("step", step))
                    x, y = global_batch(cfg, step, world, dev)
                    opt.zero_grad()
                    loss = model(x[mine], y[mine])
                    comm.log.append(("backward", 0))
                    loss.backward()
                    opt.step()
                    if step < steps - 1:
                        tracker.reset_mod_stats()  # the peaks of the last step (optimizer state exists by then)
            for h in hooks:
                h.remove()
        params = list(model.parameters())
        out[name] = {
            "log": comm.log[comm.log.index(("step", steps - 1)) + 1 :],  # the last step only
            "peak": _peak(tracker, device),
            "params": torch.cat([p.full_tensor().detach().float().reshape(-1).cpu() for p in params]),
        }
    return out


def step_traffic(log: list, world: int, shard: int, hsdp: bool, reshard) -> dict[str, float]:
    """Bytes one rank sends in a step, from the logged collectives and the size of the group each ran on
    (ring factors: (n-1)/n for all-gather and reduce-scatter, 2(n-1)/n for all-reduce). Forward all-gathers run
    on the shard group; backward all-gathers on the shard group, or on groups of `reshard` ranks when it is an
    int; HSDP's all-reduce on the replicate group."""
    back = log.index(("backward", 0))
    sent = {"forward all-gather": 0.0, "backward all-gather": 0.0, "reduce-scatter": 0.0, "all-reduce": 0.0}
    for i, (op, size) in enumerate(log):
        if op == "all-gather":
            n = shard if i < back or isinstance(reshard, bool) else reshard
            sent["forward all-gather" if i < back else "backward all-gather"] += size * (n - 1) / n
        elif op == "reduce-scatter":
            sent["reduce-scatter"] += size * (shard - 1) / shard
        elif op == "all-reduce":
            n = world // shard if hsdp else world
            sent["all-reduce"] += size * 2 * (n - 1) / n
    return sent


def gathers_ahead(log: list) -> int:
    """Most all-gathers issued beyond the modules whose forward has started: 1 when each module gathers its own
    parameters as its forward starts; 2 when it also prefetches the next one's."""
    issued, started, ahead = 0, 0, 0
    for op, _ in log:
        if op == ("backward"):
            break
        if op == "all-gather":
            issued += 1
        elif op == "forward":
            started += 1
            ahead = max(ahead, issued - started + 1)
    return ahead


@experiment(
    "fsdp2-knobs",
    "FSDP2's reshard_after_forward (True, False, 2), explicit prefetch, HSDP on a 2x2 mesh and the reduce dtype, "
    "on 4 gloo ranks: bytes moved and peak memory per setting, parameters equal to one process",
)
def fsdp2_knobs(device: str) -> Result:
    r = Result("fsdp2-knobs")
    if device == "cuda" and torch.cuda.device_count() < WORLD:
        raise ValueError(f"fsdp2-knobs needs {WORLD} GPUs (a 2x2 mesh), {torch.cuda.device_count()} visible")
    world = WORLD
    n = param_count(CFG)
    ranks = launch(knobs_rank, world, device, device=device, timeout_s=300)
    ref = single_process(device, world, bf16=False, steps=STEPS)
    ref_bf16 = single_process(device, world, bf16=True, steps=STEPS)
    tol = fp32_tolerance(ref, device)
    r.add("world", world, "ranks", "ranks")
    r.add("tolerance", tol, "", "tolerance on max |Δparam| against one process")
    r.add("params", n, "params", "model parameters Ψ")
    rows = []
    for name, (reshard, _, hsdp, reduce) in KNOBS.items():
        shard = world // 2 if hsdp else world
        x0 = ranks[0][name]
        sent = step_traffic(x0["log"], world, shard, hsdp, reshard)
        peak = x0["peak"]
        unsharded = peak.get("Unsharded Param", 0)
        sharded = peak.get("Sharded Param", 0)
        key = name.replace("=", "_").replace(" ", "_").replace(",", "")
        if reduce is None:
            equivalence_claims(r, f"FSDP2 {name}", key, [x[name]["params"] for x in ranks], ref, tol)
        else:
            err = max(float((x[name]["params"] - ref_bf16["params"]).abs().max()) for x in ranks)
            r.add(f"{key}_vs_bf16", err, "", f"{name}: max |param - one process in bf16|")
        ahead = gathers_ahead(x0["log"])
        rows.append(
            [
                name,
                sent["forward all-gather"],
                sent["backward all-gather"],
                sent["reduce-scatter"],
                sent["all-reduce"],
                sum(sent.values()),
                sharded,
                unsharded,
                ahead,
                peak.get("All Gather", 0),
                peak.get("Reduce Scatter", 0),
                peak.get("OptState", 0),
                peak.get("Activation", 0),
                peak.get("Total", 0),
            ]
        )
        r.add(f"{key}_sent", sum(sent.values()), "B", f"{name}: bytes each rank sends per step")
        r.add(f"{key}_unsharded_peak", unsharded, "B", f"{name}: peak unsharded parameter bytes")
        r.add(f"{key}_sharded", sharded, "B", f"{name}: sharded parameter bytes")
        r.add(f"{key}_allgather_peak", peak.get("All Gather", 0), "B", f"{name}: peak all-gather buffers")
    r.table(
        "knobs",
        [
            "setting",
            "forward all-gather (B)",
            "backward all-gather (B)",
            "reduce-scatter (B)",
            "all-reduce (B)",
            "sent per step (B)",
            "sharded params (B)",
            "peak unsharded params (B)",
            "all-gathers ahead",
            "peak all-gather buffers (B)",
            "peak reduce-scatter buffer (B)",
            "optimizer state (B)",
            "peak activations and other tensors (B)",
            "peak total (B)",
        ],
        rows,
        caption=f"Rank 0 of {world} gloo processes, one training step of a {n:,}-parameter GPT; bytes sent computed "
        "from each collective's counted message and its group's ring factor; memory: the most FSDPMemTracker saw per "
        "category around any module's forward and backward.",
    )
    _claims(r, {row[0]: row for row in rows}, n, world)
    return r


def _claims(r: Result, row: dict, n: int, world: int) -> None:
    """Each knob against the bytes and memory worked out by hand for Ψ fp32 parameters on N = 4 ranks."""
    psi = 4 * n  # fp32 bytes of the model
    ring = (world - 1) / world
    base = row["reshard=True"]
    r.claim(
        "reshard=True: 2 all-gathers + 1 reduce-scatter = 3 (N-1)/N x 4Ψ",
        base[5],
        3 * ring * psi,
        rel_tol=1e-12,
        unit="B",
    )
    r.claim(
        "reshard=False: no backward all-gather, 2 (N-1)/N x 4Ψ",
        row["reshard=False"][5],
        2 * ring * psi,
        rel_tol=1e-12,
        unit="B",
    )
    r.claim(
        "reshard=2: backward all-gather inside pairs, (1/2) x 4Ψ",
        row["reshard=2"][2],
        0.5 * psi,
        rel_tol=1e-12,
        unit="B",
    )
    r.claim("prefetch moves no extra bytes", row["prefetch"][5], base[5], rel_tol=1e-12, unit="B")
    r.claim("no prefetch: each module gathers as its forward starts (1 ahead)", base[8], 1)
    r.claim("prefetch: the next module's all-gather is issued too (2 ahead)", row["prefetch"][8], 2)
    shard = world // 2
    hsdp = 2 * (shard - 1) / shard * psi + (shard - 1) / shard * psi + 2 * (1 / 2) * psi / shard
    r.claim(
        "HSDP 2x2: all-gathers and reduce-scatter in pairs, all-reduce of the half shard across 2",
        row["HSDP 2x2"][5],
        hsdp,
        rel_tol=1e-12,
        unit="B",
        formula="3 x (1/2) 4Ψ + 2 (1/2) (4Ψ/2)",
    )
    r.claim("sharded parameters: 4Ψ/N", base[6], psi // world, unit="B")
    r.claim("HSDP sharded parameters: 4Ψ/(N/2)", row["HSDP 2x2"][6], psi // shard, unit="B")
    r.claim(
        "bf16 params, fp32 reduce: all-gathers halve, reduce-scatter stays",
        row["bf16, reduce fp32"][5],
        2 * ring * psi / 2 + ring * psi,
        rel_tol=1e-12,
        unit="B",
    )
    r.claim(
        "bf16 reduce halves the reduce-scatter",
        row["bf16, reduce bf16"][3],
        row["bf16, reduce fp32"][3] / 2,
        rel_tol=1e-12,
        unit="B",
    )
    r.claim("reshard=False holds the whole model unsharded at the peak", row["reshard=False"][7], psi, unit="B")
    r.claim(
        "reshard=True's peak unsharded parameters <= half of reshard=False's",
        base[7],
        row["reshard=False"][7] / 2,
        relation="<=",
        unit="B",
    )
    r.claim(
        "prefetch's peak unsharded parameters >= no prefetch's", row["prefetch"][7], base[7], relation=">=", unit="B"
    )
    block = 4 * (12 * 64 * 64 + 13 * 64)  # fp32 weights, biases and norms of one block (h = 64)
    r.claim(
        "one block gathered at a time: peak unsharded params = a block, by hand",
        base[7],
        block,
        unit="B",
        formula="4 B x (12 h^2 + 13 h), h = 64",
    )
    r.claim(
        "no prefetch: one block's all-gather buffer", base[9], block, rel_tol=0.01, unit="B", formula="padding aside"
    )
    r.claim("prefetch: two blocks' all-gather buffers at once", row["prefetch"][9], 2 * block, rel_tol=0.01, unit="B")
    r.claim(
        "reshard=2 keeps a 2-way shard (4Ψ/2) between forward and backward",
        row["reshard=2"][12] - base[12],
        psi / 2,
        rel_tol=1e-12,
        unit="B",
        formula="the tracker files it under activations",
    )
    r.claim(
        "reshard=2 per step: (3/4 + 1/2 + 3/4) x 4Ψ", row["reshard=2"][5], 2 * ring * psi + 0.5 * psi, rel_tol=1e-12
    )
    r.claim(
        "HSDP: optimizer state 2x FSDP's (sharded over 2, not 4)",
        row["HSDP 2x2"][11],
        2 * base[11],
        rel_tol=1e-3,
        unit="B",
        formula="8 B/param x Ψ/2, plus 4 B of step per tensor",
    )
    r.claim(
        "bf16 reduce halves the reduce-scatter buffer",
        row["bf16, reduce bf16"][10],
        row["bf16, reduce fp32"][10] / 2,
        rel_tol=1e-12,
        unit="B",
    )
    r.claim(
        "bf16 params, bf16 reduce: everything halves, 3 (N-1)/N x 2Ψ",
        row["bf16, reduce bf16"][5],
        3 * ring * psi / 2,
        rel_tol=1e-12,
        unit="B",
    )
