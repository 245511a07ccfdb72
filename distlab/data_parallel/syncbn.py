"""syncbn: batch normalisation whose statistics span the global batch, on real processes.

BatchNorm normalises each channel by the mean and variance of the *batch* (Ioffe & Szegedy 2015,
Algorithm 1). Under data parallelism each rank sees only its slice, so plain BatchNorm normalises by
per-rank statistics: a different function from the one a single process would compute on the whole
batch, and noisier the smaller the per-rank batch. SyncBatchNorm all-reduces the statistics (and in
backward the two sums the input gradient needs), so every rank normalises by the global mean and
variance.

`SyncBatchNormNaive` is the whole thing in one autograd Function that runs anywhere (PyTorch's
nn.SyncBatchNorm only accepts GPU tensors): forward all-reduces (sum x, count), then sum (x - mean)^2;
two passes, because the one-pass (sum x, sum x^2) cancels catastrophically when |mean| >> std. Backward
all-reduces (sum dy, sum dy * x_hat). On a GPU machine with NCCL the experiment also checks
nn.SyncBatchNorm against the same reference.

Ranks hold *different* batch sizes on purpose: the global mean is the count-weighted mean of the
per-rank means, not their plain average.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.data_parallel.ddp import all_reduce_, rank_device, subgroups
from distlab.runtime.launcher import launch

SIZES = (2, 3, 4)
BATCH = (3, 5, 4, 2)  # samples per rank: unequal on purpose
SHAPE = (6, 5, 3)  # channels C, height, width: statistics are over N * H * W values per channel
EPS, MOMENTUM = 1e-5, 0.1
TOL = 1e-12  # float64, max absolute difference


class SyncBatchNormFn(torch.autograd.Function):
    """y = weight * (x - mean) / sqrt(var + eps) + bias, with mean and var over every rank's batch."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, group):
        dims = [0] + list(range(2, x.dim()))  # every dimension but the channel
        shape = [1, -1] + [1] * (x.dim() - 2)
        c = x.shape[1]
        first = torch.cat([x.sum(dims), x.new_tensor([x.numel() // c])])
        all_reduce_(first, group)
        count = first[c]
        mean = first[:c] / count
        centred = x - mean.view(shape)
        var = all_reduce_(centred.pow(2).sum(dims), group) / count  # biased: what normalisation uses
        invstd = torch.rsqrt(var + EPS)
        x_hat = centred * invstd.view(shape)
        with torch.no_grad():
            running_mean.mul_(1 - MOMENTUM).add_(MOMENTUM * mean)
            running_var.mul_(1 - MOMENTUM).add_(MOMENTUM * var * count / (count - 1))  # unbiased, as torch
        ctx.save_for_backward(x_hat, weight, invstd, count)
        ctx.group = group
        return x_hat * weight.view(shape) + bias.view(shape)

    @staticmethod
    def backward(ctx, dy):
        x_hat, weight, invstd, count = ctx.saved_tensors
        dims = [0] + list(range(2, dy.dim()))
        shape = [1, -1] + [1] * (dy.dim() - 2)
        c = dy.shape[1]
        local = torch.cat([dy.sum(dims), (dy * x_hat).sum(dims)])  # what this rank's loss contributes
        total = all_reduce_(local.clone(), ctx.group)
        mean_dy, mean_dy_xhat = total[:c] / count, total[c:] / count
        dx = (weight * invstd).view(shape) * (dy - mean_dy.view(shape) - x_hat * mean_dy_xhat.view(shape))
        # Parameter gradients stay local: DDP (or the caller) sums or averages them across ranks.
        return dx, local[c:], local[:c], None, None, None


class SyncBatchNormNaive(nn.Module):
    def __init__(self, channels: int, group=None, dtype=torch.float64, device="cpu"):
        super().__init__()
        kw = {"dtype": dtype, "device": device}
        self.group = group
        self.weight = nn.Parameter(torch.ones(channels, **kw))
        self.bias = nn.Parameter(torch.zeros(channels, **kw))
        self.register_buffer("running_mean", torch.zeros(channels, **kw))
        self.register_buffer("running_var", torch.ones(channels, **kw))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return SyncBatchNormFn.apply(x, self.weight, self.bias, self.running_mean, self.running_var, self.group)


def rank_input(w: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s batch in the world of size `w`, and the fixed tensor its loss is weighted by.
    Rank r's data has mean r and spread 1 + r/2: per-rank statistics really differ."""
    g = torch.Generator().manual_seed(100 * w + rank)
    x = torch.randn(BATCH[rank], *SHAPE, generator=g, dtype=torch.float64) * (1 + rank / 2) + rank
    weights = torch.randn(BATCH[rank], *SHAPE, generator=g, dtype=torch.float64)
    return x, weights


def _affine(bn: nn.Module) -> None:
    """The same non-trivial scale and shift on every rank and in the reference."""
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        bn.weight.copy_(1 + 0.3 * torch.randn(SHAPE[0], generator=g, dtype=torch.float64))
        bn.bias.copy_(0.2 * torch.randn(SHAPE[0], generator=g, dtype=torch.float64))


def _run(bn: nn.Module, x: torch.Tensor, weights: torch.Tensor, group) -> dict:
    _affine(bn)
    x = x.clone().requires_grad_(True)
    out = bn(x)
    (out * weights).sum().backward()
    pgrads = torch.cat([bn.weight.grad, bn.bias.grad])
    all_reduce_(pgrads, group)  # the gradient of the sum of every rank's loss
    cpu = lambda t: t.detach().cpu()
    return {
        "out": cpu(out),
        "x_grad": cpu(x.grad),
        "param_grad": cpu(pgrads),
        "running_mean": cpu(bn.running_mean),
        "running_var": cpu(bn.running_var),
    }


def syncbn_rank(rank: int, world: int, device: str) -> dict:
    dev = rank_device(device)
    groups = subgroups(SIZES)
    torch_syncbn = device == "cuda" and dist.get_backend() == "nccl"
    out = {"torch_syncbn": torch_syncbn}
    for w in SIZES:
        if rank >= w:
            continue
        x, weights = (t.to(dev) for t in rank_input(w, rank))
        rec = {"naive": _run(SyncBatchNormNaive(SHAPE[0], groups[w], device=dev), x, weights, groups[w])}
        local = nn.BatchNorm2d(SHAPE[0], eps=EPS, momentum=MOMENTUM, dtype=torch.float64, device=dev)
        rec["local"] = _run(local, x, weights, groups[w])
        if torch_syncbn:  # PyTorch's own, on GPUs only
            bn = nn.SyncBatchNorm(
                SHAPE[0], eps=EPS, momentum=MOMENTUM, process_group=groups[w], dtype=torch.float64, device=dev
            )
            rec["torch"] = _run(bn, x, weights, groups[w])
        out[w] = rec
    return out


def reference(w: int) -> dict:
    """One process, plain BatchNorm on the concatenated global batch, loss = sum of every rank's loss."""
    xs, ws = zip(*(rank_input(w, r) for r in range(w)))
    bn = nn.BatchNorm2d(SHAPE[0], eps=EPS, momentum=MOMENTUM, dtype=torch.float64)
    _affine(bn)
    x = torch.cat(xs).requires_grad_(True)
    out = bn(x)
    (out * torch.cat(ws)).sum().backward()
    split = lambda t: list(t.detach().split(BATCH[:w]))
    return {
        "out": split(out),
        "x_grad": split(x.grad),
        "param_grad": torch.cat([bn.weight.grad, bn.bias.grad]),
        "running_mean": bn.running_mean,
        "running_var": bn.running_var,
        "mean": x.detach().mean((0, 2, 3)),
    }


def _max_diff(rec: dict, ref: dict, rank: int) -> dict[str, float]:
    d = lambda a, b: float((a - b).abs().max())
    return {
        "out": d(rec["out"], ref["out"][rank]),
        "x_grad": d(rec["x_grad"], ref["x_grad"][rank]),
        "param_grad": d(rec["param_grad"], ref["param_grad"]),
        "running": max(d(rec["running_mean"], ref["running_mean"]), d(rec["running_var"], ref["running_var"])),
    }


@experiment(
    "syncbn",
    "SyncBatchNorm across real processes (W = 2, 3, 4, unequal batches) = one process's "
    "BatchNorm on the full batch; per-rank BatchNorm differs",
)
def syncbn(device: str) -> Result:
    r = Result("syncbn")
    ranks = launch(syncbn_rank, max(SIZES), device, device=device, timeout_s=300)
    kinds = ["naive"] + (["torch"] if ranks[0]["torch_syncbn"] else [])
    r.data["checked"] = kinds
    rows, mean_gap = [], 0.0
    for w in SIZES:
        ref = reference(w)
        worst = {
            kind: {
                k: max(_max_diff(ranks[rank][w][kind], ref, rank)[k] for rank in range(w))
                for k in ("out", "x_grad", "param_grad", "running")
            }
            for kind in kinds + ["local"]
        }
        for kind in kinds:
            label = "SyncBatchNormNaive" if kind == "naive" else "nn.SyncBatchNorm"
            for key, what in (
                ("out", "outputs"),
                ("x_grad", "input gradients"),
                ("param_grad", "weight and bias gradients (summed over ranks)"),
                ("running", "running mean and variance"),
            ):
                r.claim(
                    f"W={w}, {label}: {what} vs one process on the full batch, max |difference|",
                    worst[kind][key],
                    TOL,
                    relation="<=",
                    formula="float64",
                )
        local_mean_gap = max(
            float((ranks[k][w]["local"]["running_mean"] / MOMENTUM - ref["mean"]).abs().max()) for k in range(w)
        )
        xs = [rank_input(w, k)[0] for k in range(w)]  # by hand: each rank's channel means against the whole batch's
        whole = torch.cat(xs).mean((0, 2, 3))
        by_hand_gap = max(max(float(abs(a - b)) for a, b in zip(x.mean((0, 2, 3)), whole)) for x in xs)
        mean_gap = max(mean_gap, abs(local_mean_gap - by_hand_gap))
        rows.append(
            [
                w,
                str(list(BATCH[:w])),
                worst["naive"]["out"],
                worst["naive"]["x_grad"],
                worst["local"]["out"],
                local_mean_gap,
            ]
        )
        r.add(f"w{w}_local_out_gap", worst["local"]["out"], "", f"W={w}: max |per-rank BN output - full-batch BN|")
        r.add(f"w{w}_local_mean_gap", local_mean_gap, "", f"W={w}: max |per-rank mean - global mean|")
    r.claim("per-rank mean gap = the ranks' inputs by hand", mean_gap, 0.0, abs_tol=1e-12)
    r.table(
        "syncbn",
        [
            "W",
            "samples per rank",
            "SyncBN output: largest Δ vs full batch",
            "SyncBN input gradient: largest Δ",
            "per-rank BN output: largest Δ",
            "per-rank mean − global mean, worst channel",
        ],
        rows,
        caption=f"float64, input (N, {', '.join(map(str, SHAPE))}); rank r's data has mean r. Checked: "
        + ", ".join("SyncBatchNormNaive" if k == "naive" else "nn.SyncBatchNorm" for k in kinds),
    )
    return r
