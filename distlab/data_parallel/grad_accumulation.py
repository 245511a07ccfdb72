"""grad-accumulation: k micro-batches under `no_sync`, then one step, equals one step on the k-times
larger batch; and the variable-length pitfall, shown wrong and right.

Fixed-size micro-batches: each rank runs k forward/backward passes on micro-batches of b samples with
the loss divided by k, inside DDP's `no_sync()` for all but the last, so gradients accumulate locally
and are all-reduced once. The accumulated gradient is the gradient of the mean over k*b samples per
rank, W*k*b in all: the same as one step on the big batch, up to rounding. Without `no_sync` the result
is the same but every micro-batch pays a full all-reduce (k times the traffic).

Variable-length sequences: the loss that should be minimised is the mean over all *tokens* of the
global batch. Averaging each micro-batch's token mean and then averaging those over micro-batches and
ranks weights a token in a short micro-batch more than one in a long micro-batch: a different gradient,
not a rounding error. Right: sum the token losses, divide by the global token count (one tiny
all-reduce of the counts before the step) and multiply by W, because DDP divides by W.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.data_parallel.ddp import all_reduce_, ddp, float64_vector, mlp, rank_device, regression_batch
from distlab.models.gpt import GPT, GPTConfig
from distlab.runtime.launcher import launch

WORLD = 3
K = 4  # micro-batches per step
MICRO = 5  # samples per micro-batch (fixed-size part)
LAYERS = (11, 29, 7)
LR = 0.1
TOL = 1e-5  # relative gradient / parameter difference, float32 (rounding is ~1e-7)
CFG = GPTConfig(vocab=61, seq=24, layers=1, hidden=24, heads=3)
SEQS = 2  # sequences per micro-batch (variable-length part)
IGNORE = -100


def _counting_hook(state: dict, bucket):
    state["calls"] += 1
    return default_hooks.allreduce_hook(state["group"], bucket)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def rel_by_hand(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b|| written out on plain Python floats (fsum of squares), the reference `_rel`'s
    numbers are claimed against."""
    xs, ys = a.tolist(), b.tolist()
    return math.sqrt(math.fsum((x - y) ** 2 for x, y in zip(xs, ys))) / math.sqrt(math.fsum(y * y for y in ys))


# ---------------------------------------------------------------- fixed-size micro-batches
def _micro(rank: int, i: int, dev) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = regression_batch(0, WORLD * K * MICRO, LAYERS[0], LAYERS[-1], device=dev)
    lo = (rank * K + i) * MICRO
    return x[lo : lo + MICRO], y[lo : lo + MICRO]


def _accumulate(rank: int, dev, device: str, *, big_batch: bool, use_no_sync: bool) -> dict:
    model = mlp(LAYERS, seed=7, device=dev)
    wrapped = ddp(model, device)
    state = {"calls": 0, "group": None}
    wrapped.register_comm_hook(state, _counting_hook)
    rows = 0  # samples this rank trained on, counted from the tensors
    if big_batch:
        xs, ys = zip(*(_micro(rank, i, dev) for i in range(K)))
        rows = sum(len(x) for x in xs)
        F.mse_loss(wrapped(torch.cat(xs)), torch.cat(ys)).backward()
    else:
        for i in range(K):
            x, y = _micro(rank, i, dev)
            rows += len(x)
            ctx = wrapped.no_sync() if use_no_sync and i < K - 1 else contextlib.nullcontext()
            with ctx:
                (F.mse_loss(wrapped(x), y) / K).backward()  # mean over k*b samples, not k means summed
    grads = float64_vector(p.grad for p in model.parameters())
    torch.optim.SGD(model.parameters(), lr=LR).step()
    return {"grad": grads, "params": float64_vector(model.parameters()), "calls": state["calls"], "rows": rows}


def _fixed_reference(dev) -> dict:
    model = mlp(LAYERS, seed=7, device=dev)
    x, y = regression_batch(0, WORLD * K * MICRO, LAYERS[0], LAYERS[-1], device=dev)
    F.mse_loss(model(x), y).backward()
    grads = float64_vector(p.grad for p in model.parameters())
    torch.optim.SGD(model.parameters(), lr=LR).step()
    return {"grad": grads, "params": float64_vector(model.parameters())}


# ---------------------------------------------------------------- variable-length sequences
def lengths(rank: int, i: int) -> list[int]:
    """Tokens per sequence: even micro-batches short (2-4 tokens), odd ones long (19-24): a plausible
    packing of a length-skewed dataset, and the case where the pitfall is large."""
    g = torch.Generator().manual_seed(1000 * rank + i)
    lo, hi = (2, 5) if i % 2 == 0 else (CFG.seq - 5, CFG.seq + 1)
    return torch.randint(lo, hi, (SEQS,), generator=g).tolist()


def token_batch(rank: int, i: int, dev) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded inputs and targets; padding targets are IGNORE, so they carry no loss."""
    g = torch.Generator().manual_seed(50_000 + 1000 * rank + i)
    data = torch.randint(0, CFG.vocab, (SEQS, CFG.seq + 1), generator=g)
    x, y = data[:, :-1].clone(), data[:, 1:].clone()  # (SEQS, seq)
    for s, n in enumerate(lengths(rank, i)):
        x[s, n:] = 0
        y[s, n:] = IGNORE
    return x.to(dev), y.to(dev)


def _token_loss_sum(model, x, y) -> tuple[torch.Tensor, int]:
    logits = model(x)  # (SEQS, seq, vocab)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), ignore_index=IGNORE, reduction="sum")
    return loss, int((y != IGNORE).sum())


def _variable_length(rank: int, world: int, dev, device: str, normalise: str) -> tuple[torch.Tensor, list[int]]:
    torch.manual_seed(3)
    model = GPT(CFG).to(dev)
    wrapped = ddp(model, device)
    count = torch.tensor([float(sum(sum(lengths(rank, i)) for i in range(K)))], device=dev)
    all_reduce_(count)  # global tokens, known before the first backward
    counted = []  # tokens per micro-batch, counted from the targets (y != IGNORE)
    for i in range(K):
        x, y = token_batch(rank, i, dev)
        ctx = wrapped.no_sync() if i < K - 1 else contextlib.nullcontext()
        with ctx:
            loss_sum, tokens = _token_loss_sum(wrapped, x, y)
            counted.append(tokens)
            if normalise == "per micro-batch":  # the pitfall: each micro-batch's token mean, averaged
                loss = loss_sum / tokens / K
            else:  # sum over tokens / global tokens, times W because DDP averages over ranks
                loss = loss_sum * world / count
            loss.backward()
    return float64_vector(p.grad for p in model.parameters()), counted


def _variable_reference(world: int, dev) -> dict:
    """One process over every micro-batch of every rank: the token mean, and the mean of means."""
    out = {}
    for kind in ("token mean", "mean of micro-batch means"):
        torch.manual_seed(3)
        model = GPT(CFG).to(dev)
        total = sum(sum(lengths(r, i)) for r in range(world) for i in range(K))
        for r in range(world):
            for i in range(K):
                loss_sum, tokens = _token_loss_sum(model, *token_batch(r, i, dev))
                (loss_sum / total if kind == "token mean" else loss_sum / tokens / (world * K)).backward()
        out[kind] = float64_vector(p.grad for p in model.parameters())
    return out


def accumulation_rank(rank: int, world: int, device: str) -> dict:
    dev = rank_device(device)
    out = {
        "no_sync": _accumulate(rank, dev, device, big_batch=False, use_no_sync=True),
        "every micro-batch synced": _accumulate(rank, dev, device, big_batch=False, use_no_sync=False),
        "big batch": _accumulate(rank, dev, device, big_batch=True, use_no_sync=False),
        "per micro-batch": _variable_length(rank, world, dev, device, "per micro-batch")[0],
    }
    out["global tokens"], out["tokens counted"] = _variable_length(rank, world, dev, device, "global tokens")
    out["backend"] = dist.get_backend()
    if rank == 0:
        out["fixed reference"] = _fixed_reference(dev)
        out["variable reference"] = _variable_reference(world, dev)
    return out


@experiment(
    "grad-accumulation",
    "k micro-batches under no_sync = one step on a k-times larger batch; "
    "variable-length sequences normalised wrong and right",
)
def grad_accumulation(device: str) -> Result:
    r = Result("grad-accumulation")
    ranks = launch(accumulation_rank, WORLD, device, device=device, timeout_s=300)
    zero = ranks[0]
    r.add("world", WORLD, "ranks", "ranks")
    r.add("k", K, "micro-batches", "micro-batches per step")
    r.add("micro", MICRO, "samples", "samples per micro-batch")
    r.add("global_batch", WORLD * K * MICRO, "samples", "global batch")
    r.claim(
        "global batch = samples the ranks trained on (counted)",
        r.quantities["global_batch"].value,
        sum(rk["no_sync"]["rows"] for rk in ranks),
        unit="samples",
    )
    ref = zero["fixed reference"]
    rows, shown = [], []  # shown: (relative difference on the page, the same by hand)
    for name in ("no_sync", "every micro-batch synced", "big batch"):
        rec = zero[name]
        g, p = _rel(rec["grad"], ref["grad"]), _rel(rec["params"], ref["params"])
        shown += [(g, rel_by_hand(rec["grad"], ref["grad"])), (p, rel_by_hand(rec["params"], ref["params"]))]
        rows.append([name, rec["calls"], g, p])
        r.claim(f"{name}: gradient vs one process on the global batch (relative)", g, TOL, relation="<=")
        r.add(f"{name.replace(' ', '_')}_grad_rel", g, "", f"{name}: relative gradient difference")
    r.claim(
        "no_sync: step after k micro-batches vs one step on the k-times larger batch (relative, parameters)",
        _rel(zero["no_sync"]["params"], zero["big batch"]["params"]),
        TOL,
        relation="<=",
    )
    calls_sync = zero["every micro-batch synced"]["calls"]
    calls_no_sync = zero["no_sync"]["calls"]
    r.claim(
        "all-reduce calls: syncing every micro-batch costs k times no_sync's",
        calls_sync,
        K * calls_no_sync,
        formula=f"k = {K}",
    )
    r.add("calls_no_sync", calls_no_sync, "calls", "bucket all-reduces per step with no_sync")
    r.add("calls_every", calls_sync, "calls", "bucket all-reduces per step syncing every micro-batch")
    r.table(
        "fixed",
        [
            "how",
            "bucket all-reduces per step",
            "gradient vs global batch (relative)",
            "parameters after one step (relative)",
        ],
        rows,
        caption=f"W = {WORLD} {zero['backend']} processes, k = {K} micro-batches of {MICRO} samples, float32",
    )

    vref = zero["variable reference"]
    wrong = _rel(zero["per micro-batch"], vref["token mean"])
    right = _rel(zero["global tokens"], vref["token mean"])
    wrong_is_means = _rel(zero["per micro-batch"], vref["mean of micro-batch means"])
    shown += [
        (wrong, rel_by_hand(zero["per micro-batch"], vref["token mean"])),
        (right, rel_by_hand(zero["global tokens"], vref["token mean"])),
    ]
    r.claim(
        "every relative difference shown = ||a - b|| / ||b|| summed by hand (worst relative gap)",
        max(abs(v - h) / h if h else v for v, h in shown),
        1e-9,
        relation="<=",
        formula="plain-Python fsum over the float64 vectors",
    )
    r.claim(
        "variable length, sum / global tokens: gradient vs the global token mean (relative)", right, TOL, relation="<="
    )
    r.claim(
        "variable length, mean per micro-batch: gradient vs the global token mean (relative) is large",
        wrong,
        0.05,
        relation=">=",
        formula="a different loss, not rounding",
    )
    r.claim(
        "... because it is the gradient of the mean of micro-batch means (relative difference)",
        wrong_is_means,
        TOL,
        relation="<=",
    )
    r.add("wrong_rel", wrong, "fraction", "per-micro-batch means: gradient error")
    r.add("right_rel", right, "", "global-token normalisation: gradient error")
    toks = [[sum(lengths(rk, i)) for i in range(K)] for rk in range(WORLD)]
    flat_toks = [t for row in toks for t in row]
    counted = [rk["tokens counted"] for rk in ranks]  # (W, k) tokens the ranks counted in their targets
    r.claim("tokens per micro-batch = the ranks' counts", int(toks != counted), 0)
    r.add("tokens_min", min(flat_toks), "tokens", "fewest tokens in a micro-batch")
    r.add("tokens_max", max(flat_toks), "tokens", "most tokens in a micro-batch")
    r.add(
        "weight_ratio",
        max(flat_toks) / min(flat_toks),
        "",
        "how much more a token of the shortest micro-batch weighs than one of the longest, when averaging means",
    )
    fewest, most = min(min(row) for row in counted), max(max(row) for row in counted)
    r.claim("token weight ratio = most / fewest counted", r.quantities["weight_ratio"].value, most / fewest)
    r.table(
        "variable",
        ["normalisation", "gradient vs global token mean (relative)"],
        [
            ["token loss / tokens of its micro-batch, averaged over micro-batches and ranks", wrong],
            ["token loss × W / tokens of the global batch (all-reduced count)", right],
        ],
        caption=f"Tokens per micro-batch, rank by rank: {toks}; tiny GPT, W = {WORLD}, k = {K}",
    )
    return r
