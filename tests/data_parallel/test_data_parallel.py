"""Chapter 5 on real gloo processes, against references written here: float64 single-process training,
nn.BatchNorm2d on the concatenated batch, hand-computed bucket sizes, closed forms of the overlap model
and a Monte Carlo step of SGD.

Exact (==) where the maths is the same on every rank (replicas, bucket sizes, call counts); close where
a cross-rank sum changes the order of additions (DDP vs one process: float64, 1e-12)."""

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from distlab.data_parallel import batch_lr_scaling as bs
from distlab.data_parallel.ddp import DataParallelNaive, ddp, float64_vector, mlp, regression_batch
from distlab.data_parallel.ddp_buckets import buckets_rank, predict_buckets, step_time, timeline
from distlab.data_parallel.grad_accumulation import (
    CFG,
    IGNORE,
    WORLD,
    K,
    accumulation_rank,
    lengths,
    rel_by_hand,
    token_batch,
)
from distlab.data_parallel.syncbn import BATCH, EPS, MOMENTUM, SHAPE, SIZES, rank_input, syncbn_rank
from distlab.models.gpt import GPT
from distlab.runtime.launcher import launch

LAYERS = (7, 19, 3)


def _train_rank(rank, world, steps, local):
    """DDP and naive DP, float64, W = world, different initial weights per rank."""
    group = None
    out = {}
    for kind in ("ddp", "naive"):
        model = mlp(LAYERS, seed=rank, dtype=torch.float64)
        wrapped = ddp(model, "cpu", group) if kind == "ddp" else DataParallelNaive(model, group)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for s in range(steps):
            x, y = regression_batch(s, world * local, LAYERS[0], LAYERS[-1], torch.float64)
            x, y = x[rank * local : (rank + 1) * local], y[rank * local : (rank + 1) * local]
            opt.zero_grad()
            F.mse_loss(wrapped(x), y).backward()
            if kind == "naive":
                wrapped.sync_gradients()
            opt.step()
        out[kind] = float64_vector(model.parameters())
    return out


def test_ddp_and_naive_replicas_are_identical_and_equal_one_process_on_the_global_batch():
    """Would catch gradients summed but not averaged (a W-times larger step), a missing initial broadcast
    (replicas that start apart stay apart), or a rank training on the wrong slice."""
    world, steps, local = 3, 3, 4
    out = launch(_train_rank, world, steps, local)
    for kind in ("ddp", "naive"):
        for rec in out[1:]:
            assert torch.equal(rec[kind], out[0][kind]), kind  # bit-identical replicas
    model = mlp(LAYERS, seed=0, dtype=torch.float64)  # rank 0's initial weights, one process
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for s in range(steps):
        x, y = regression_batch(s, world * local, LAYERS[0], LAYERS[-1], torch.float64)
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    ref = float64_vector(model.parameters())
    assert float((out[0]["ddp"] - ref).abs().max()) < 1e-12
    assert float((out[0]["naive"] - ref).abs().max()) < 1e-12


# ---------------------------------------------------------------- SyncBatchNorm
def test_syncbn_matches_batchnorm_on_the_concatenated_batch():
    """Unequal batches (3, 5, 4, 2) and rank-dependent means: catches a global mean taken as the plain
    average of rank means, a variance from the one-pass formula, a backward that uses local sums, or
    running statistics with the biased variance."""
    ranks = launch(syncbn_rank, 4, "cpu")
    for w in SIZES:
        xs, ws = zip(*(rank_input(w, r) for r in range(w)))
        bn = nn.BatchNorm2d(SHAPE[0], eps=EPS, momentum=MOMENTUM, dtype=torch.float64)
        g = torch.Generator().manual_seed(5)  # the affine parameters the experiment sets
        with torch.no_grad():
            bn.weight.copy_(1 + 0.3 * torch.randn(SHAPE[0], generator=g, dtype=torch.float64))
            bn.bias.copy_(0.2 * torch.randn(SHAPE[0], generator=g, dtype=torch.float64))
        x = torch.cat(xs).requires_grad_(True)
        out = bn(x)
        (out * torch.cat(ws)).sum().backward()
        outs, grads = out.detach().split(BATCH[:w]), x.grad.split(BATCH[:w])
        for r in range(w):
            rec = ranks[r][w]["naive"]
            torch.testing.assert_close(rec["out"], outs[r], rtol=0, atol=1e-12)
            torch.testing.assert_close(rec["x_grad"], grads[r], rtol=0, atol=1e-12)
            torch.testing.assert_close(rec["param_grad"], torch.cat([bn.weight.grad, bn.bias.grad]), rtol=0, atol=1e-12)
            torch.testing.assert_close(rec["running_var"], bn.running_var, rtol=0, atol=1e-12)
            torch.testing.assert_close(rec["running_mean"], bn.running_mean, rtol=0, atol=1e-12)
            assert float((ranks[r][w]["local"]["out"] - outs[r]).abs().max()) > 0.1  # per-rank BN differs


def _gradcheck_rank(rank, world):
    from distlab.data_parallel.syncbn import SyncBatchNormFn

    g = torch.Generator().manual_seed(0)
    x = (torch.randn(4, 3, 2, generator=g, dtype=torch.float64) * 3 + 5).requires_grad_(True)
    w = (torch.rand(3, generator=g, dtype=torch.float64) + 0.5).requires_grad_(True)
    b = torch.randn(3, generator=g, dtype=torch.float64).requires_grad_(True)
    rm, rv = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    return torch.autograd.gradcheck(lambda x, w, b: SyncBatchNormFn.apply(x, w, b, rm, rv, None), (x, w, b))


def test_syncbn_backward_against_finite_differences():
    """The hand-written backward, checked numerically (one rank: gradcheck perturbs one rank's input)."""
    assert launch(_gradcheck_rank, 1) == [True]


# ---------------------------------------------------------------- buckets and overlap
def test_ddp_buckets_follow_the_cap_hand_computed():
    """6 x Linear(384, 384): a layer is 384*384*4 + 384*4 = 591,360 bytes. At 1 MiB (1,048,576) one layer
    stays under the cap and two pass it, so 3 buckets of 1,182,720. Catches MB read as 10^6 or a
    bucket closed before it reaches the cap."""
    out = launch(buckets_rank, 2, "cpu", (1,), 2)
    rec = out[0][1]
    assert [b["bytes"] for b in rec["buckets"]] == [2 * 591_360] * 3
    assert [len(b["params"]) for b in rec["buckets"]] == [4, 4, 4]
    assert all(b["launch_s"] <= b["finish_s"] for b in rec["buckets"])
    assert rec["buckets"][0]["params"][0].startswith("10.")  # the last Linear (index 10) comes first


def test_predict_buckets_rule():
    assert predict_buckets([3, 3, 3, 3, 3], cap_bytes=5) == [6, 6, 3]  # closes once it reaches the cap
    assert predict_buckets([3, 3, 3], cap_bytes=6) == [6, 3]  # reaching the cap exactly closes it
    assert predict_buckets([1, 1, 10, 1], cap_bytes=100, first_cap_bytes=2) == [2, 11]
    assert predict_buckets([], cap_bytes=5) == []


def test_overlap_model_closed_forms():
    """Three buckets, hand-computed timelines. Fast link (1 B/s, bucket 1 s < next compute 2 s): only the
    last all-reduce is exposed. Slow link: they queue back to back after the first segment."""
    compute, nbytes = [2.0, 2.0, 2.0], [1.0, 1.0, 1.0]
    assert timeline(compute, nbytes, 1.0) == [(2.0, 3.0), (4.0, 5.0), (6.0, 7.0)]
    assert step_time(compute, nbytes, 1.0) == 7.0
    assert step_time(compute, nbytes, 1.0, overlap=False) == 9.0
    assert timeline(compute, nbytes, 0.25) == [(2.0, 6.0), (6.0, 10.0), (10.0, 14.0)]
    assert step_time(compute, nbytes, 0.25) == 14.0  # 2 + 3 * 4
    assert step_time(compute, nbytes, 1.0, latency_s=0.5) == 7.5
    assert step_time([1.0], [0.0], 1.0) == 1.0
    with pytest.raises(ValueError, match="one compute segment per bucket"):
        step_time([1.0], [1.0, 2.0], 1.0)
    with pytest.raises(ValueError, match="bandwidth"):
        step_time([1.0], [1.0], 0.0)


# ---------------------------------------------------------------- gradient accumulation
def test_variable_length_batches_are_padded_with_ignored_targets():
    for rank in range(WORLD):
        for i in range(K):
            x, y = token_batch(rank, i, "cpu")
            for row, n in zip(y, lengths(rank, i)):
                assert (row[:n] != IGNORE).all() and (row[n:] == IGNORE).all()


def test_accumulation_against_a_token_mean_computed_here():
    """Catches a normalisation that forgets DDP's division by W, that counts padding as tokens, or an
    accumulation that all-reduces every micro-batch despite no_sync."""
    ranks = launch(accumulation_rank, WORLD, "cpu")
    torch.manual_seed(3)
    model = GPT(CFG)
    total_loss, total_tokens = 0.0, 0
    for r in range(WORLD):
        for i in range(K):
            x, y = token_batch(r, i, "cpu")
            logits = model(x).flatten(0, 1)
            keep = y.flatten() != IGNORE
            total_loss = total_loss + F.cross_entropy(logits[keep], y.flatten()[keep], reduction="sum")
            total_tokens += int(keep.sum())
    (total_loss / total_tokens).backward()
    ref = float64_vector(p.grad for p in model.parameters())
    for rec in ranks:  # every rank holds the same all-reduced gradient
        right = rec["global tokens"]
        assert float((right - ref).norm() / ref.norm()) < 1e-5
        assert float((rec["per micro-batch"] - ref).norm() / ref.norm()) > 0.05
    assert ranks[0]["no_sync"]["calls"] == 1 and ranks[0]["every micro-batch synced"]["calls"] == K


def test_rel_by_hand_on_a_hand_worked_case():
    """Catches a relative difference that divides by ||a|| or multiplies by ||b||: ||(3.3, 4.4) - (3, 4)|| = 0.5 and
    ||(3, 4)|| = 5, so 0.1."""
    a, b = torch.tensor([3.3, 4.4], dtype=torch.float64), torch.tensor([3.0, 4.0], dtype=torch.float64)
    assert rel_by_hand(a, b) == pytest.approx(0.1, rel=1e-12)


# ---------------------------------------------------------------- batch and learning rate
def test_critical_batch_and_rules():
    assert bs.critical_batch() == pytest.approx(2 * bs.B0 / (bs.LR0 * bs.EIGEN_MAX))
    assert bs.learning_rate("linear", 4 * bs.B0) == pytest.approx(4 * bs.LR0)
    assert bs.learning_rate("square root", 4 * bs.B0) == pytest.approx(2 * bs.LR0)
    assert bs.learning_rate("linear, capped at 1/λmax", 10**6) == pytest.approx(1 / bs.EIGEN_MAX)
    with pytest.raises(ValueError):
        bs.learning_rate("cubic", 8)


def test_expected_loss_recursion_against_monte_carlo_one_step():
    """One SGD step from w = 0 at B = 2, predicted by the recursion, against 200,000 sampled batches
    (fixed seed; the standard error is ~0.4 %, the tolerance 2 %). Catches a wrong fourth-moment term
    (the 1 + 1/B and tr(Lambda D) / B parts) or a noise term off by a factor."""
    batch, rule = 2, "constant"
    predicted = bs.expected_loss(batch, rule, seeds=bs.SEEDS, samples=batch)  # one step
    lam = bs.eigenvalues()
    w_star = torch.randn(bs.SEEDS, bs.DIM, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    g = torch.Generator().manual_seed(123)
    n = 200_000
    x = torch.randn(n, batch, bs.DIM, generator=g, dtype=torch.float64) * lam.sqrt()
    losses = []
    for s in range(bs.SEEDS):
        y = x @ w_star[s] + bs.NOISE * torch.randn(n, batch, generator=g, dtype=torch.float64)
        w = bs.LR0 * (x * y[..., None]).mean(1)  # one step from 0: w = -lr * grad = lr * mean(x y)
        d = w - w_star[s]
        losses.append(float((0.5 * (d * d * lam).sum(-1)).mean()))
    assert np.mean(losses) == pytest.approx(predicted, rel=0.02)


def test_linear_rule_diverges_past_the_stability_limit():
    assert bs.train(2048, "linear", seeds=1) > 1e3  # inf when the weights overflowed
    assert bs.train(2048, "linear, capped at 1/λmax", seeds=1) < 1.0


def _all_reduce_rank(rank, world):
    t = torch.tensor([rank + 1.0])
    from distlab.data_parallel.ddp import all_reduce_

    all_reduce_(t)
    return t.item(), dist.get_world_size()


def test_all_reduce_helper():
    assert launch(_all_reduce_rank, 2) == [(3.0, 2), (3.0, 2)]
