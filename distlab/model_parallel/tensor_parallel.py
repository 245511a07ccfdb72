"""Megatron tensor parallelism (Shoeybi et al. 2019, https://arxiv.org/abs/1909.08053) and sequence
parallelism (Korthikanti et al. 2022, https://arxiv.org/abs/2205.05198) on real processes.

One transformer block (distlab.models.gpt.Block) is split over a group of t ranks: attention heads and the
MLP's inner width are divided by t. The first linear of each half is column-parallel (each rank
computes its own output columns, no communication), the second is row-parallel (each rank computes a
partial sum of the output, summed by an all-reduce). So per block: forward runs two all-reduces (the
`g` operator after attention and after the MLP) and backward two more (the `f` operator, summing the
input gradient before each half). Sequence parallelism replaces each all-reduce by a reduce-scatter
and an all-gather of the same total bytes, and keeps the LayerNorm regions sharded along the sequence.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.hardware.collectives import bus_bandwidth_factor
from distlab.models.gpt import Block, GPTConfig
from distlab.runtime.host_staging import to_host


# ---------------------------------------------------------------- collectives that keep a log
class Comm:
    """A process group and a log of every collective issued through it, in the order issued:
    (op, phase, bytes of the full tensor). `phase` is set by the caller ("forward" / "backward")."""

    def __init__(self, group=None):
        self.group = group
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.phase = "forward"
        self.log: list[tuple[str, str, int]] = []

    def _host(self, x: torch.Tensor) -> torch.Tensor:
        return to_host(x, self.group)  # a CUDA tensor on gloo goes through the CPU (distlab.runtime.host_staging)

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        self.log.append(("all-reduce", self.phase, x.numel() * x.element_size()))
        y = self._host(x).contiguous().clone()
        dist.all_reduce(y, group=self.group)
        return y.to(x.device)

    def all_gather(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        y = self._host(x).contiguous()
        parts = [torch.empty_like(y) for _ in range(self.size)]
        dist.all_gather(parts, y, group=self.group)
        out = torch.cat(parts, dim).to(x.device)
        self.log.append(("all-gather", self.phase, out.numel() * out.element_size()))
        return out

    def reduce_scatter(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        self.log.append(("reduce-scatter", self.phase, x.numel() * x.element_size()))
        chunks = [c.contiguous() for c in self._host(x).chunk(self.size, dim)]
        out = torch.empty_like(chunks[self.rank])
        dist.reduce_scatter(out, chunks, group=self.group)
        return out.to(x.device)


def ring_wire_bytes(op: str, full_bytes: int, t: int) -> float:
    """Bytes each rank sends in a ring implementation: all-reduce 2(t-1)/t N, reduce-scatter and
    all-gather (t-1)/t N each, for a full tensor of N bytes (nccl-tests' bus-bandwidth factor, from
    distlab.hardware.collectives: the one place it is derived)."""
    return bus_bandwidth_factor(op, t) * full_bytes


# ---------------------------------------------------------------- the f and g operators
class CopyToTensorParallel(torch.autograd.Function):
    """The `f` operator of Megatron-LM (Shoeybi et al. 2019, Figure 3): identity in forward,
    all-reduce of the input gradient in backward."""

    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return ctx.comm.all_reduce(grad), None


class ReduceFromTensorParallel(torch.autograd.Function):
    """The `g` operator of Megatron-LM: all-reduce of the partial outputs in forward, identity in
    backward (every rank already holds the full output gradient)."""

    @staticmethod
    def forward(ctx, x, comm):
        return comm.all_reduce(x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class GatherFromSequenceParallel(torch.autograd.Function):
    """Korthikanti et al. 2022's `g` (Figure 5): all-gather the sequence shards in forward,
    reduce-scatter the gradient in backward."""

    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return comm.all_gather(x, dim=1)

    @staticmethod
    def backward(ctx, grad):
        return ctx.comm.reduce_scatter(grad, dim=1), None


class ScatterToSequenceParallel(torch.autograd.Function):
    """Korthikanti et al. 2022's `g-bar`: reduce-scatter the partial outputs along the sequence in
    forward, all-gather the gradient in backward."""

    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return comm.reduce_scatter(x, dim=1)

    @staticmethod
    def backward(ctx, grad):
        return ctx.comm.all_gather(grad, dim=1), None


# ---------------------------------------------------------------- the split block
class TensorParallelBlock(nn.Module):
    """distlab.models.gpt.Block split over `comm`'s t ranks. Column-parallel: qkv (this rank's heads) and
    MLP up (this rank's columns). Row-parallel: attention proj and MLP down (this rank's rows; their
    bias is added once, after the reduction). LayerNorms are replicated, or with sequence_parallel
    run on this rank's 1/t of the sequence."""

    def __init__(self, ref: Block, comm: Comm, *, sequence_parallel: bool = False):
        super().__init__()
        t, r = comm.size, comm.rank
        h, heads, ffn = ref.ln1.weight.numel(), ref.attn.heads, ref.mlp.up.out_features
        if heads % t or ffn % t:
            raise ValueError(f"heads ({heads}) and ffn ({ffn}) must be divisible by t = {t}")
        self.comm, self.sp, self.heads = comm, sequence_parallel, heads // t
        cols = slice(r * h // t, (r + 1) * h // t)  # this rank's heads inside each of q, k, v
        inner = slice(r * ffn // t, (r + 1) * ffn // t)
        qkv_w, qkv_b = ref.attn.qkv.weight.detach(), ref.attn.qkv.bias.detach()
        take = lambda w: nn.Parameter(w.clone())
        self.ln1, self.ln2 = _copy(ref.ln1), _copy(ref.ln2)
        self.qkv_w = take(torch.cat([qkv_w[i * h : (i + 1) * h][cols] for i in range(3)]))  # (3h/t, h)
        self.qkv_b = take(torch.cat([qkv_b[i * h : (i + 1) * h][cols] for i in range(3)]))
        self.proj_w = take(ref.attn.proj.weight.detach()[:, cols])  # (h, h/t)
        self.proj_b = take(ref.attn.proj.bias.detach())  # replicated, added after the reduction
        self.up_w = take(ref.mlp.up.weight.detach()[inner])  # (ffn/t, h)
        self.up_b = take(ref.mlp.up.bias.detach()[inner])
        self.down_w = take(ref.mlp.down.weight.detach()[:, inner])  # (h, ffn/t)
        self.down_b = take(ref.mlp.down.bias.detach())

    def _enter(self, x):
        return (GatherFromSequenceParallel if self.sp else CopyToTensorParallel).apply(x, self.comm)

    def _leave(self, x):
        return (ScatterToSequenceParallel if self.sp else ReduceFromTensorParallel).apply(x, self.comm)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """Attention sub-layer on a LayerNorm output: this rank's heads, then the reduction."""
        x = self._enter(x)
        b, n, _ = x.shape
        q, k, v = F.linear(x, self.qkv_w, self.qkv_b).chunk(3, dim=-1)  # (B, N, h/t) each
        d = q.shape[-1] // self.heads
        q, k, v = (z.view(b, n, self.heads, d).transpose(1, 2) for z in (q, k, v))  # (B, H/t, N, D)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d)
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        y = (F.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, n, -1)  # (B, N, h/t)
        return self._leave(F.linear(y, self.proj_w)) + self.proj_b  # partial sums over heads, reduced

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        """MLP sub-layer on a LayerNorm output: GeLU(X A_i) B_i on this rank, then the reduction."""
        up = F.gelu(F.linear(self._enter(x), self.up_w, self.up_b))  # (B, N, ffn/t)
        return self._leave(F.linear(up, self.down_w)) + self.down_b

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, N, h), or (B, N/t, h) with sequence_parallel
        x = x + self.attention(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def _copy(ln: nn.LayerNorm) -> nn.LayerNorm:
    out = nn.LayerNorm(ln.normalized_shape, eps=ln.eps)
    out.load_state_dict(ln.state_dict())
    return out


# Gradients by layout: which full-layer gradient slice each rank's parameter gradient must equal.
COLUMN = ("qkv_w", "qkv_b", "up_w", "up_b")  # split along output features: rank-local dot products
ROW = ("proj_w", "down_w")  # split along input features: rank-local dot products
REPLICATED = ("proj_b", "down_b", "ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias")


def reference_grads(ref: Block, t: int, r: int) -> dict[str, torch.Tensor]:
    """Rank r's slice of each full-layer gradient, in TensorParallelBlock's parameter names."""
    h, ffn = ref.ln1.weight.numel(), ref.mlp.up.out_features
    cols, inner = slice(r * h // t, (r + 1) * h // t), slice(r * ffn // t, (r + 1) * ffn // t)
    g = {n: p.grad for n, p in ref.named_parameters()}
    if g["ln1.weight"] is None:  # a sub-layer run: only its own parameters have gradients
        g = {n: (torch.zeros_like(p) if v is None else v) for (n, p), v in zip(ref.named_parameters(), g.values())}
    return {
        "qkv_w": torch.cat([g["attn.qkv.weight"][i * h : (i + 1) * h][cols] for i in range(3)]),
        "qkv_b": torch.cat([g["attn.qkv.bias"][i * h : (i + 1) * h][cols] for i in range(3)]),
        "proj_w": g["attn.proj.weight"][:, cols],
        "proj_b": g["attn.proj.bias"],
        "up_w": g["mlp.up.weight"][inner],
        "up_b": g["mlp.up.bias"][inner],
        "down_w": g["mlp.down.weight"][:, inner],
        "down_b": g["mlp.down.bias"],
        "ln1.weight": g["ln1.weight"],
        "ln1.bias": g["ln1.bias"],
        "ln2.weight": g["ln2.weight"],
        "ln2.bias": g["ln2.bias"],
    }


# ---------------------------------------------------------------- one rank's check
SUBLAYER_PARAMS = {"attention": ("qkv_w", "qkv_b", "proj_w", "proj_b"), "mlp": ("up_w", "up_b", "down_w", "down_b")}


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.detach().double() - b.detach().double()).abs().max().item()


def _run(module, x: torch.Tensor, weight: torch.Tensor, comm: Comm | None = None):
    """Forward, loss = sum(out * weight), backward; returns (output, input gradient)."""
    x = x.detach().clone().requires_grad_(True)
    y = module(x)
    if comm is not None:
        comm.phase = "backward"
    (y * weight).sum().backward()
    return y.detach(), x.grad


def tp_check(
    rank: int, world: int, cfg_kwargs: dict, group_sizes: tuple[int, ...], batch: int, seq: int, device: str = "cpu"
) -> dict:
    """On every rank: the full block in float32 and float64 (same seed everywhere), then the block split
    over groups of each size in `group_sizes`. Per t: each sub-layer alone on the identical input
    (what is bit-exact), the whole block (what is only close), the whole block with sequence
    parallelism; with the collective logs and the outputs."""
    dev = torch.device(f"cuda:{torch.cuda.current_device()}" if device == "cuda" else "cpu")
    cfg = GPTConfig(**cfg_kwargs)
    torch.manual_seed(0)
    ref = Block(cfg).to(dev)
    ref64 = Block(cfg).to(dev).double()
    ref64.load_state_dict(ref.state_dict())
    gen = torch.Generator().manual_seed(1)
    x, weight = (torch.randn(batch, seq, cfg.hidden, generator=gen).to(dev) for _ in range(2))  # (B, N, h)
    full = {"fp32": _run(ref, x, weight), "fp64": _run(ref64, x.double(), weight.double())}
    block_grads = {n: p.grad.clone() for n, p in ref.named_parameters()}
    results = {
        "block_fp32_output_vs_fp64": _max_diff(full["fp32"][0], full["fp64"][0]),
        "block_fp32_input_grad_vs_fp64": _max_diff(full["fp32"][1], full["fp64"][1]),
        "block_output_scale": full["fp64"][0].abs().max().item(),
        "block_input_grad_scale": full["fp64"][1].abs().max().item(),
    }
    sub_ref = {}
    for name in SUBLAYER_PARAMS:
        ref.zero_grad()
        module = "attn" if name == "attention" else name
        sub_ref[name + "64"] = _run(getattr(ref64, module), x.double(), weight.double())
        sub_ref[name] = _run(getattr(ref, module), x, weight)
        sub_ref[name + "_grads"] = {n: p.grad.clone() for n, p in ref.named_parameters() if p.grad is not None}
        results[name + "_fp32_output_vs_fp64"] = _max_diff(sub_ref[name][0], sub_ref[name + "64"][0])
        results[name + "_fp32_input_grad_vs_fp64"] = _max_diff(sub_ref[name][1], sub_ref[name + "64"][1])
        results[name + "_output_scale"] = sub_ref[name + "64"][0].abs().max().item()
        results[name + "_input_grad_scale"] = sub_ref[name + "64"][1].abs().max().item()
    for t in group_sizes:
        groups = [dist.new_group(list(range(i, i + t))) for i in range(0, world, t)]  # every rank makes every group
        group = groups[rank // t]
        for name, params in SUBLAYER_PARAMS.items():  # each sub-layer alone, on the identical input
            comm = Comm(group)
            block = TensorParallelBlock(ref, comm).to(dev)
            y, dx = _run(getattr(block, name), x, weight, comm)
            _set_grads(ref, sub_ref[name + "_grads"])
            want = reference_grads(ref, t, comm.rank)
            grads = dict(block.named_parameters())
            results[(t, name)] = {
                "output": _max_diff(y, sub_ref[name][0]),
                "output_vs_fp64": _max_diff(y, sub_ref[name + "64"][0]),
                "input_grad": _max_diff(dx, sub_ref[name][1]),
                "input_grad_vs_fp64": _max_diff(dx, sub_ref[name + "64"][1]),
                "grads": {n: _max_diff(grads[n].grad, want[n]) for n in params},
                "log": comm.log,
            }
        _set_grads(ref, block_grads)
        for sp in (False, True):
            comm = Comm(group)
            r = comm.rank
            part = functools.partial(_sequence_shard, t=t, r=r, sp=sp)
            block = TensorParallelBlock(ref, comm, sequence_parallel=sp).to(dev)
            y, dx = _run(block, part(x), part(weight), comm)
            if sp:  # replicated parameters saw only this rank's tokens: sum their gradients over the group
                comm.phase = "grad-sync"
                for n, p in block.named_parameters():
                    if n in REPLICATED:
                        p.grad = comm.all_reduce(p.grad)
            want = reference_grads(ref, t, r)
            grads = dict(block.named_parameters())
            results[(t, "sp" if sp else "block")] = {
                "output": _max_diff(y, part(full["fp32"][0])),
                "output_vs_fp64": _max_diff(y, part(full["fp64"][0])),
                "input_grad": _max_diff(dx, part(full["fp32"][1])),
                "input_grad_vs_fp64": _max_diff(dx, part(full["fp64"][1])),
                "grads": {n: _max_diff(grads[n].grad, want[n]) for n in want},
                "log": comm.log,
                "grad_scales": {n: want[n].abs().max().item() for n in want},
                "output_bits": y.cpu(),
            }
    return results


def _sequence_shard(z: torch.Tensor, *, t: int, r: int, sp: bool) -> torch.Tensor:
    return z.chunk(t, dim=1)[r] if sp else z  # (B, N/t, h) with sequence parallelism


def _set_grads(model: nn.Module, grads: dict[str, torch.Tensor]) -> None:
    for n, p in model.named_parameters():
        p.grad = grads.get(n)


# ---------------------------------------------------------------- the experiment
CONFIG = dict(vocab=8, seq=16, layers=1, hidden=72, heads=12)  # head dim 6, ffn 288: divisible by 2, 3, 4
BATCH, SEQ = 3, 12  # SEQ divisible by t for sequence parallelism
WORLD, GROUP_SIZES = 4, (4, 2)  # one world of 4 ranks runs t = 4 and two groups of t = 2
CLOSE_FACTOR = 3.0  # split error vs float64 at most 3x the unsplit float32 error, + one float32 ulp at the scale
ULP32 = 2.0**-23  # float32 machine epsilon
MATRICES = ("qkv_w", "proj_w", "up_w", "down_w")


def run_checks(device: str = "cpu", world: int = WORLD, group_sizes=GROUP_SIZES) -> list[dict]:
    """Launch the world and return every rank's results (one gloo/NCCL world for all t)."""
    from distlab.runtime.launcher import launch

    backend = None
    if device == "cuda" and torch.cuda.device_count() < world:
        backend = "gloo"  # fewer GPUs than ranks: ranks share a GPU, gloo stages through the host
    return launch(
        tp_check, world, CONFIG, group_sizes, BATCH, SEQ, device, device=device, backend=backend, timeout_s=300
    )


def close_bound(unsplit_err: float, scale: float) -> float:
    """The FlashAttention rule: the split layer's error against float64 may be a small multiple of
    the unsplit float32 layer's own error, plus one float32 ulp at the tensor's largest magnitude."""
    return CLOSE_FACTOR * unsplit_err + ULP32 * scale


@experiment(
    "tensor-parallel",
    "Megatron tensor parallelism (t = 2 and 4) and sequence parallelism on real "
    "processes: split layer vs unsplit, bit-exact vs close, collectives and bytes",
)
def tensor_parallel(device: str) -> Result:
    r = Result("tensor-parallel")
    ranks = run_checks(device)
    h, tokens = CONFIG["hidden"], BATCH * SEQ
    act_bytes = tokens * h * 4  # one (B, N, h) fp32 activation
    exact_tol = 0.0 if device == "cpu" else 1e-5  # cuBLAS may pick a different kernel for a narrower matrix
    rows = []
    for t in GROUP_SIZES:
        for part in ("attention", "mlp", "block", "sp"):
            res = [x[(t, part)] for x in ranks]
            unsplit = "block" if part in ("block", "sp") else part
            first = ranks[0]
            out_bound = close_bound(first[f"{unsplit}_fp32_output_vs_fp64"], first[f"{unsplit}_output_scale"])
            grad_bound = close_bound(first[f"{unsplit}_fp32_input_grad_vs_fp64"], first[f"{unsplit}_input_grad_scale"])
            out_err = max(x["output_vs_fp64"] for x in res)
            grad_err = max(x["input_grad_vs_fp64"] for x in res)
            label = {
                "attention": "attention alone",
                "mlp": "MLP alone",
                "block": "whole block",
                "sp": "whole block, sequence parallel",
            }[part]
            r.claim(
                f"t={t}, {label}: output close to the unsplit layer (vs float64)",
                out_err,
                out_bound,
                relation="<=",
                formula=f"<= {CLOSE_FACTOR:g} x unsplit float32 error + 1 ulp",
            )
            r.claim(f"t={t}, {label}: input gradient close (vs float64)", grad_err, grad_bound, relation="<=")
            matrices = [n for n in MATRICES if n in res[0]["grads"]]
            mat_err = max(x["grads"][n] for x in res for n in matrices)
            other = [n for n in res[0]["grads"] if n not in MATRICES]
            other_err = max(x["grads"][n] for x in res for n in other)
            if part in ("attention", "mlp"):
                r.claim(
                    f"t={t}, {label}: weight-matrix gradients bit-exact",
                    mat_err,
                    0.0,
                    abs_tol=exact_tol,
                    formula="rank-local dot products over the same operands",
                )
            else:
                rel = max(x["grads"][n] / x["grad_scales"][n] for x in res for n in x["grads"])
                r.claim(
                    f"t={t}, {label}: every parameter gradient close to the unsplit float32 one (relative)",
                    rel,
                    16 * ULP32,
                    relation="<=",
                    formula="<= 16 float32 ulps of the gradient's largest entry",
                )
            first = ranks[0][(t, part)]
            rows.append([t, label, first["output"], first["input_grad"], mat_err, other_err])
        _collectives(r, ranks, t, act_bytes)
        same = all(torch.equal(ranks[0][(t, "block")]["output_bits"], x[(t, "block")]["output_bits"]) for x in ranks)
        r.claim(
            f"t={t}: every rank holds bit-identical block outputs",
            float(same),
            1.0,
            formula="one all-reduce result, broadcast",
        )
    r.table(
        "agreement",
        [
            "t",
            "what",
            "output vs unsplit fp32",
            "input grad vs unsplit fp32",
            "weight-matrix grads (max)",
            "bias and LayerNorm grads (max)",
        ],
        rows,
        caption="Largest absolute differences over all ranks; 0 means bit-identical.",
    )
    r.add("hidden", h, "", "hidden width of the test block")
    r.add("heads", CONFIG["heads"], "", "attention heads")
    r.add("tokens", tokens, "tokens", "tokens per step (batch x sequence)")
    r.add("activation_bytes", act_bytes, "B", "one (B, N, h) float32 activation")
    return r


def _collectives(r: Result, ranks: list[dict], t: int, act_bytes: int) -> None:
    """Count and size the collectives of one block, as issued (from the logs)."""
    from distlab.data_parallel.ring_allreduce import traffic  # the ring simulated message by message (chapter 5)

    def count(part, op, phase):
        return sum(1 for o, p, _ in ranks[0][(t, part)]["log"] if o == op and p == phase)

    def wire(part, phase):
        return sum(ring_wire_bytes(o, b, t) for o, p, b in ranks[0][(t, part)]["log"] if p == phase)

    for phase in ("forward", "backward"):
        n = count("block", "all-reduce", phase)
        r.claim(f"t={t}: all-reduces per block in {phase}", n, 2, formula="f and g: one per sub-layer")
        sizes = {b for o, p, b in ranks[0][(t, "block")]["log"] if p == phase}
        r.claim(f"t={t}: bytes per {phase} all-reduce", max(sizes), act_bytes, formula="B x N x h x 4 bytes")
        r.claim(
            f"t={t}: sequence parallel, all-gathers + reduce-scatters in {phase}",
            count("sp", "all-gather", phase) + count("sp", "reduce-scatter", phase),
            4,
        )
        r.claim(
            f"t={t}: sequence parallel sends the same bytes as the all-reduces ({phase})",
            wire("sp", phase),
            wire("block", phase),
            rel_tol=1e-12,
            unit="B",
            formula="2(t-1)/t N = (t-1)/t N + (t-1)/t N",
        )
        r.add(f"t{t}_{phase}_wire_bytes", wire("block", phase), "B", f"bytes each rank sends per block, {phase}")
        r.claim(
            f"t={t}: bytes each rank sends per block in {phase} = 2 all-reduces of the ring simulator",
            wire("block", phase),
            2 * max(traffic(act_bytes, t, "ring", element_bytes=4).sent),
            rel_tol=1e-12,
            unit="B",
            formula="Megatron's f and g, each a ring all-reduce of B x N x h fp32",
        )
    sync = sum(b for _, p, b in ranks[0][(t, "sp")]["log"] if p == "grad-sync")
    r.add(
        f"t{t}_sp_gradsync_bytes",
        sync,
        "B",
        "LayerNorm and bias gradients summed over the group under sequence parallelism",
    )
    h = CONFIG["hidden"]
    r.claim(
        f"t={t}: sequence parallelism sums 6 vectors of h fp32 gradients over the group (2 LayerNorms' weight and "
        "bias, the two row-parallel biases)",
        sync,
        6 * h * 4,
        unit="B",
    )
