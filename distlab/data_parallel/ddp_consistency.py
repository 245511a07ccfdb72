"""ddp-consistency: DDP replicas stay bit-identical, and equal one process training on the global batch.

One world of 4 real processes; sub-groups of the first 2, 3 and 4 ranks give world sizes W = 2, 3, 4.
In each, every rank starts from *different* weights (seeded by rank, on purpose: DDP's constructor
broadcasts rank 0's), sees a different slice of each global batch, and takes K SGD steps. Then:

- replicas: every rank applied the same averaged gradient to the same weights, so the parameters are
  identical bit for bit (claim: max difference exactly 0);
- global batch: one process training rank 0's initial weights on the whole global batch reaches the
  same parameters up to rounding, because the mean of W equal-sized slice means is the global mean. Not
  bit-equal: the all-reduce adds the W partial gradients in another order than one matmul does. In
  float64 the gap is ~1e-16; in float32 ~1e-8 (the stated tolerances leave a wide margin);
- naive data parallelism (one all-reduce per tensor after backward) reaches the same parameters too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.data_parallel.ddp import (
    DataParallelNaive,
    ddp,
    float64_vector,
    mlp,
    rank_device,
    regression_batch,
    subgroups,
)
from distlab.runtime.launcher import launch

SIZES = (2, 3, 4)
LAYERS = (13, 37, 37, 5)  # awkward widths on purpose
LOCAL_BATCH = 6
STEPS = 5
LR, MOMENTUM = 0.05, 0.9
TOL = {"float32": 1e-6, "float64": 1e-12}  # max |parameter difference|, absolute (parameters are O(0.3))
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _train(model, step_fn, rank: int, world: int, dtype, dev, steps: int, rows_per_rank: int | None):
    """K SGD steps; rows_per_rank=None trains on the whole global batch (the single-process reference)."""
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for s in range(steps):
        x, y = regression_batch(s, world * LOCAL_BATCH, LAYERS[0], LAYERS[-1], dtype, dev)
        if rows_per_rank is not None:
            mine = slice(rank * rows_per_rank, (rank + 1) * rows_per_rank)
            x, y = x[mine], y[mine]
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        step_fn()
        opt.step()
        losses.append(loss.item())
    return losses


def consistency_rank(rank: int, world: int, device: str, steps: int) -> dict:
    dev = rank_device(device)
    groups = subgroups(SIZES)
    out = {}
    for w in SIZES:
        if rank >= w:
            continue
        for name, dtype in DTYPES.items():
            model = mlp(LAYERS, seed=100 + rank, dtype=dtype, device=dev)
            init = float64_vector(model.parameters())
            wrapped = ddp(model, device, groups[w])
            after_wrap = float64_vector(model.parameters())
            losses = _train(wrapped, lambda: None, rank, w, dtype, dev, steps, LOCAL_BATCH)
            naive = DataParallelNaive(mlp(LAYERS, seed=100 + rank, dtype=dtype, device=dev), groups[w])
            _train(naive, naive.sync_gradients, rank, w, dtype, dev, steps, LOCAL_BATCH)
            rec = {
                "init": init,
                "after_wrap": after_wrap,
                "ddp": float64_vector(model.parameters()),
                "naive": float64_vector(naive.parameters()),
                "losses": losses,
                "backend": torch.distributed.get_backend(),
            }
            if rank == 0:  # one process, rank 0's initial weights, the whole global batch
                ref = mlp(LAYERS, seed=100, dtype=dtype, device=dev)
                _train(ref, lambda: None, 0, w, dtype, dev, steps, None)
                rec["reference"] = float64_vector(ref.parameters())
            out[(w, name)] = rec
    return out


def one_process_spreads(w: int, dtype) -> tuple[float, float]:
    """Re-derived in this process, without DDP or a second process: the largest weight difference of ranks 1..W-1's
    seeds from rank 0's before DDP, and the spread of the ranks' first losses (rank 0's weights, which DDP's
    broadcast gives every rank, on each rank's slice of batch 0)."""
    first = float64_vector(mlp(LAYERS, seed=100, dtype=dtype).parameters())
    seeds = [float64_vector(mlp(LAYERS, seed=100 + k, dtype=dtype).parameters()) for k in range(1, w)]
    init = max(float((v - first).abs().max()) for v in seeds)
    model = mlp(LAYERS, seed=100, dtype=dtype)
    x, y = regression_batch(0, w * LOCAL_BATCH, LAYERS[0], LAYERS[-1], dtype)
    with torch.no_grad():
        losses = [float(F.mse_loss(model(xk), yk)) for xk, yk in zip(x.split(LOCAL_BATCH), y.split(LOCAL_BATCH))]
    return init, max(losses) - min(losses)


def _spread(recs: list[dict], key: str) -> float:
    """Largest element-wise difference of recs[k][key] from rank 0's."""
    return max(float((rec[key] - recs[0][key]).abs().max()) for rec in recs)


@experiment(
    "ddp-consistency",
    "DDP on real processes (W = 2, 3, 4): replicas bit-identical, equal to one process on the global batch",
)
def ddp_consistency(device: str) -> Result:
    r = Result("ddp-consistency")
    per_rank = launch(consistency_rank, max(SIZES), device, STEPS, device=device, timeout_s=300)
    r.add("steps", STEPS, "steps", "SGD steps per run")
    r.add("local_batch", LOCAL_BATCH, "samples", "samples per rank per step")
    r.add("params", len(per_rank[0][(2, "float32")]["init"]), "params", "parameters of the MLP")
    backend = per_rank[0][(2, "float32")]["backend"]
    r.data["backend"] = backend
    rows, init_gap, loss_gap = [], 0.0, 0.0
    for w in SIZES:
        for name in DTYPES:
            recs = [per_rank[k][(w, name)] for k in range(w)]
            init_spread, wrap_spread, ddp_spread = (_spread(recs, key) for key in ("init", "after_wrap", "ddp"))
            vs_ref = float((recs[0]["ddp"] - recs[0]["reference"]).abs().max())
            vs_naive = max(float((rec["naive"] - rec["ddp"]).abs().max()) for rec in recs)
            loss_spread = max(rec["losses"][0] for rec in recs) - min(rec["losses"][0] for rec in recs)
            if name == "float32":
                r.claim(
                    f"W={w}: parameters identical on every rank after {STEPS} steps (max difference)", ddp_spread, 0.0
                )
                r.claim(f"W={w}: DDP's constructor makes differently seeded replicas identical", wrap_spread, 0.0)
            r.claim(
                f"W={w}, {name}: DDP vs one process on the global batch, max |parameter difference|",
                vs_ref,
                TOL[name],
                relation="<=",
                formula="rounding only: the all-reduce sums in another order",
            )
            r.claim(
                f"W={w}, {name}: naive data parallelism vs DDP, max |parameter difference|",
                vs_naive,
                TOL[name],
                relation="<=",
            )
            rows.append([w, name, init_spread, ddp_spread, vs_ref, vs_naive, loss_spread])
            init_ref, loss_ref = one_process_spreads(w, DTYPES[name])
            init_gap = max(init_gap, abs(init_spread - init_ref))
            loss_gap = max(loss_gap, abs(loss_spread - loss_ref) / loss_ref)
            r.add(f"w{w}_{name}_vs_reference", vs_ref, "", f"W={w} {name}: max |DDP - single process|")
            r.add(f"w{w}_{name}_init_spread", init_spread, "", f"W={w} {name}: max weight difference before DDP")
            r.add(f"w{w}_{name}_loss_spread", loss_spread, "", f"W={w} {name}: spread of the ranks' first losses")
    r.claim("spread before DDP = one process's re-derivation", init_gap, 0.0)
    r.claim("first-loss spread = one process's (relative)", loss_gap, 1e-5, relation="<=")
    r.table(
        "consistency",
        [
            "W",
            "dtype",
            "largest Δ between ranks before DDP",
            f"... after {STEPS} DDP steps",
            "largest Δ, DDP vs one process",
            "largest Δ, naive vs DDP",
            "spread of first local losses",
        ],
        rows,
        caption=f"Parameters compared element by element; one world of 4 processes ({backend}), sub-groups of "
        "the first 2, 3 and 4 ranks",
    )
    return r
