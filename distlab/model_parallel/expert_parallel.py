"""Expert parallelism: a mixture-of-experts layer with top-k routing and a capacity factor (GShard,
Lepikhin et al. 2020, https://arxiv.org/abs/2006.16668; Switch, Fedus et al. 2021,
https://arxiv.org/abs/2101.03961), split over R ranks that each hold E/R experts, with the two
all-to-alls (dispatch, combine) counted byte by byte. Ranks are simulated in one process.

Capacity: each group of tokens (one rank's tokens) may send at most C = ceil(cf x T_group x k / E)
tokens to each expert; assignments beyond it are dropped (the token skips that expert, and the
residual connection carries it). First choices take places before second choices (GShard's order).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from distlab.core.experiments import experiment
from distlab.core.results import Result


@dataclass(frozen=True, kw_only=True)
class MoEConfig:
    hidden: int = 64
    """Model width h."""
    ffn: int = 128
    """Inner width of each expert's MLP."""
    experts: int = 8
    """Number of experts E."""
    top_k: int = 2
    """Experts per token k."""
    capacity_factor: float = 1.25
    """cf: an expert takes at most ceil(cf x T x k / E) assignments from each group of T tokens."""

    def __post_init__(self) -> None:
        for name in ("hidden", "ffn", "experts", "top_k"):
            if getattr(self, name) <= 0:
                raise ValueError(f"MoEConfig.{name} must be positive, got {getattr(self, name)}")
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) cannot exceed experts ({self.experts})")
        if not self.capacity_factor > 0:
            raise ValueError(f"capacity_factor must be positive, got {self.capacity_factor}")

    def capacity(self, tokens: int) -> int:
        return math.ceil(self.capacity_factor * tokens * self.top_k / self.experts)


class MoE(nn.Module):
    """Router plus E GeLU MLPs on one device: the reference the expert-parallel version must match."""

    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.cfg = cfg
        self.router = nn.Linear(cfg.hidden, cfg.experts, bias=False)
        self.up = nn.Parameter(torch.randn(cfg.experts, cfg.hidden, cfg.ffn) / math.sqrt(cfg.hidden))
        self.down = nn.Parameter(torch.randn(cfg.experts, cfg.ffn, cfg.hidden) / math.sqrt(cfg.ffn))

    def route(self, x: torch.Tensor, groups: int = 1) -> dict:
        """Top-k routing with capacity, group by group. Returns per assignment (token, expert, gate,
        kept) in priority order, and per group the load each expert was offered."""
        cfg, t = self.cfg, x.shape[0]
        if t % groups:
            raise ValueError(f"{t} tokens do not split into {groups} groups")
        probs = F.softmax(self.router(x).float(), dim=-1)  # (T, E)
        gate, expert = probs.topk(cfg.top_k, dim=-1)  # (T, k)
        gate = gate / gate.sum(-1, keepdim=True)  # renormalise over the chosen experts
        per_group = t // groups
        cap = cfg.capacity(per_group)
        token = torch.arange(t, device=x.device).repeat_interleave(cfg.top_k).view(t, cfg.top_k)
        group = token // per_group
        # priority: group, then choice (all first choices before second ones), then token order
        order = torch.argsort(
            group.T.flatten() * (cfg.top_k * t) + torch.arange(t * cfg.top_k, device=x.device), stable=True
        )
        tok, exp = token.T.flatten()[order], expert.T.flatten()[order]
        grp, g = group.T.flatten()[order], gate.T.flatten()[order]
        onehot = F.one_hot(grp * cfg.experts + exp, groups * cfg.experts)  # (T k, groups E)
        position = (onehot.cumsum(0) * onehot).sum(-1) - 1  # place in its (group, expert) queue
        loads = onehot.sum(0).view(groups, cfg.experts)
        return {
            "token": tok,
            "expert": exp,
            "group": grp,
            "gate": g,
            "kept": position < cap,
            "loads": loads,
            "capacity": cap,
        }

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x @ self.up[e]) @ self.down[e]

    def forward(self, x: torch.Tensor, groups: int = 1) -> torch.Tensor:  # x: (T, h)
        route = self.route(x, groups)
        out = torch.zeros_like(x)
        keep = route["kept"]
        for e in range(self.cfg.experts):
            at = keep & (route["expert"] == e)
            tokens = route["token"][at]
            out.index_add_(0, tokens, self.expert(e, x[tokens]) * route["gate"][at, None].to(x.dtype))
        return out


def expert_parallel_forward(moe: MoE, x: torch.Tensor, ranks: int, bytes_per_element: int | None = None):
    """The same layer over `ranks` simulated ranks: rank r owns tokens r*T/R.. and experts r*E/R..
    Dispatch all-to-all, local experts, combine all-to-all. Returns (output, per-rank bytes)."""
    cfg, t, h = moe.cfg, x.shape[0], x.shape[1]
    if cfg.experts % ranks or t % ranks:
        raise ValueError(f"experts ({cfg.experts}) and tokens ({t}) must be divisible by ranks ({ranks})")
    local = cfg.experts // ranks
    elem = bytes_per_element or x.element_size()
    route = moe.route(x, groups=ranks)  # each rank routes its own tokens (group = rank)
    keep = route["kept"]
    owner = route["expert"] // local  # which rank holds the expert
    sent = [0] * ranks  # dispatch bytes leaving each rank (not counting what stays local)
    received = [[] for _ in range(ranks)]  # per destination: (token, expert, gate) buffers, from every source
    for src in range(ranks):
        mine = keep & (route["group"] == src)
        for dst in range(ranks):
            at = mine & (owner == dst)
            received[dst].append((route["token"][at], route["expert"][at], route["gate"][at]))
            if dst != src:
                sent[src] += int(at.sum()) * h * elem
    out = torch.zeros_like(x)
    for dst in range(ranks):  # each rank runs its experts on what arrived, then sends results back
        tokens = torch.cat([b[0] for b in received[dst]])
        experts = torch.cat([b[1] for b in received[dst]])
        gates = torch.cat([b[2] for b in received[dst]])
        inputs = x[tokens]  # (tokens that arrived, h): the dispatch all-to-all's output
        results = torch.empty_like(inputs)
        for e in range(dst * local, (dst + 1) * local):
            at = experts == e
            results[at] = moe.expert(e, inputs[at])
        out.index_add_(0, tokens, results * gates[:, None].to(x.dtype))  # the combine all-to-all, then the sum
    padded = (ranks - 1) * local * route["capacity"] * h * elem  # fixed-size buffers: C slots per expert
    return out, {"dispatch_bytes": sent, "combine_bytes": list(sent), "padded_bytes": padded, "route": route}


def dropped_fraction(loads: torch.Tensor, capacity: int) -> float:
    """From the offered loads alone: assignments beyond capacity, over all assignments."""
    return (loads - capacity).clamp(min=0).sum().item() / loads.sum().item()


# ---------------------------------------------------------------- inputs
def zipf_tokens(n: int, vocab: int, hidden: int, *, exponent: float = 1.0, seed: int = 0) -> torch.Tensor:
    """Hidden states of a token stream whose ids follow Zipf's law (frequency ~ 1/rank, as words in
    text do): a random embedding per id. Frequent ids send many identical inputs to the same experts."""
    g = torch.Generator().manual_seed(seed)
    weights = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64) ** exponent
    ids = torch.multinomial(weights, n, replacement=True, generator=g)
    table = torch.randn(vocab, hidden, generator=g)
    return table[ids]


def gaussian_tokens(n: int, hidden: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, hidden, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- the experiment
TOKENS, RANKS, VOCAB = 4096, 4, 2000
CAPACITY_FACTORS = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0)


@experiment(
    "expert-parallel",
    "MoE with top-2 routing and a capacity factor over 4 ranks: all-to-all bytes "
    "per rank, dropped tokens and load imbalance on Zipf-distributed and Gaussian tokens",
)
def expert_parallel(device: str) -> Result:
    r = Result("expert-parallel")
    dev = torch.device("cuda" if device == "cuda" else "cpu")
    torch.manual_seed(0)
    base = MoEConfig()
    moe = MoE(base).to(dev)
    inputs = {
        "Zipf token ids": zipf_tokens(TOKENS, VOCAB, base.hidden).to(dev),
        "Gaussian": gaussian_tokens(TOKENS, base.hidden).to(dev),
    }
    curves, rows = {}, []
    for name, x in inputs.items():
        curves[name] = []
        for cf in CAPACITY_FACTORS:
            moe.cfg = MoEConfig(capacity_factor=cf)
            out, info = expert_parallel_forward(moe, x, RANKS)
            route = info["route"]
            dropped = 1 - route["kept"].double().mean().item()
            curves[name].append(dropped)
            r.claim(
                f"{name}, cf={cf:g}: dropped fraction = excess load over capacity",
                dropped,
                dropped_fraction(route["loads"], route["capacity"]),
                rel_tol=1e-12,
                abs_tol=1e-15,
                formula="sum over (rank, expert) of max(0, load - C) / (T k)",
            )
            if cf in (1.0, 1.25):  # the one-device layer, for two capacity factors (it is the slow part)
                want = moe(x, groups=RANKS)
                r.claim(
                    f"{name}, cf={cf:g}: expert-parallel output equals the one-device layer",
                    (out - want).abs().max(),
                    0.0,
                    abs_tol=1e-5,
                    formula="float32, same routing and capacity",
                )
            remote = sum(
                int((route["kept"] & (route["group"] == s) & (route["expert"] // (base.experts // RANKS) != s)).sum())
                for s in range(RANKS)
            )
            r.claim(
                f"{name}, cf={cf:g}: dispatch bytes = remote assignments x h x 4",
                sum(info["dispatch_bytes"]),
                remote * base.hidden * 4,
                unit="B",
            )
            loads = route["loads"].float()
            imbalance = (loads.max() / loads.mean()).item()
            rows.append(
                [name, cf, route["capacity"], dropped, max(info["dispatch_bytes"]), info["padded_bytes"], imbalance]
            )
        loads = route["loads"].float()
        need = (loads.max(dim=1).values / (TOKENS // RANKS * base.top_k / base.experts)).max().item()
        r.add(f"{_key(name)}_imbalance", (loads.max() / loads.mean()).item(), "", f"{name}: busiest expert / mean")
        r.add(f"{_key(name)}_cf_no_drops", need, "", f"{name}: capacity factor at which nothing is dropped")
        moe.cfg = MoEConfig(capacity_factor=need)
        r.claim(
            f"{name}: no drops at cf = busiest expert's load / mean load",
            1 - moe.route(x, RANKS)["kept"].double().mean().item(),
            0.0,
            formula="C >= max load",
        )
        r.add(
            f"{_key(name)}_dropped_at_1",
            curves[name][CAPACITY_FACTORS.index(1.0)],
            "fraction",
            f"{name}: dropped at cf = 1",
        )
        r.add(
            f"{_key(name)}_dropped_at_125",
            curves[name][CAPACITY_FACTORS.index(1.25)],
            "fraction",
            f"{name}: dropped at cf = 1.25",
        )
    moe.cfg = base
    r.table(
        "capacity",
        [
            "input",
            "capacity factor",
            "C per (rank, expert)",
            "dropped",
            "dispatch bytes, busiest rank",
            "padded dispatch bytes per rank",
            "busiest expert / mean",
        ],
        rows,
        caption=f"T = {TOKENS} tokens over R = {RANKS} ranks, E = {base.experts} experts, k = {base.top_k}, "
        f"h = {base.hidden}, float32.",
    )
    for key, v in (
        ("tokens", TOKENS),
        ("ranks", RANKS),
        ("experts", base.experts),
        ("top_k", base.top_k),
        ("hidden", base.hidden),
    ):
        r.add(key, v, "", key)
    _figure(r, curves)
    return r


def _key(name: str) -> str:
    return "zipf" if name.startswith("Zipf") else "gaussian"


def _figure(r: Result, curves: dict[str, list[float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.2, 3.2))
    for name, ys in curves.items():
        ax.plot(CAPACITY_FACTORS, [100 * y for y in ys], "o-", label=name)
    ax.set_xlabel("capacity factor")
    ax.set_ylabel("assignments dropped (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    r.figure(
        "dropped",
        fig,
        f"Dropped token-expert assignments against the capacity factor, top-2 of 8 experts, "
        f"{TOKENS} tokens over {RANKS} ranks.",
    )
