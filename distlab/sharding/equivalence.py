"""What every sharded-training check compares against: one process running AdamW on the global batch, and the
claims that a sharded run (ZeRO-1, FSDP2) ends with the same parameters. Shared by distlab.sharding.zero1 and
distlab.sharding.fsdp2."""

from __future__ import annotations

import torch

from distlab.core.results import Result
from distlab.models.gpt import GPT, GPTConfig, random_batch

CFG = GPTConfig()  # 136,960 parameters: 1 mod 3, so a world of 3 pads 2 elements


ADAMW = {"lr": 1e-3, "weight_decay": 0.1}


STEPS = 3


PER_RANK_BATCH = 2


def global_batch(cfg: GPTConfig, step: int, world: int, device: str):
    """The global batch of `step`: PER_RANK_BATCH sequences per rank, identical on every rank and in the
    single process; rank r trains on rows [r·PER_RANK_BATCH, (r+1)·PER_RANK_BATCH)."""
    return random_batch(cfg, PER_RANK_BATCH * world, seed=1000 + step, device=device)


def seeded_model(cfg: GPTConfig, device: str) -> GPT:
    """The same initial model in every process."""
    torch.manual_seed(0)
    return GPT(cfg).to(device)


def _params_vector(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).float().cpu() for p in model.parameters()])


def bias_masks(model) -> dict[str, torch.Tensor]:
    """Where the attention query and key biases sit in the flat parameter vector ({"query", "key"}).

    The key bias has zero gradient in exact arithmetic (adding q·b_k to every score of a query leaves its
    softmax unchanged), so what backward returns for it is rounding noise; Adam, which divides by the
    gradient's own scale, turns that noise into steps of about lr whose sign depends on the order of the
    additions. Comparisons of parameters after Adam steps report it apart from the rest."""
    masks = {"query": [], "key": []}
    for name, p in model.named_parameters():
        for which, part in (("query", 0), ("key", 1)):
            m = torch.zeros(p.numel(), dtype=torch.bool)
            if name.endswith("attn.qkv.bias"):
                h = p.numel() // 3  # (q | k | v) biases
                m[part * h : (part + 1) * h] = True
            masks[which].append(m)
    return {k: torch.cat(v) for k, v in masks.items()}


def single_process(device: str, world: int, cfg: GPTConfig = CFG, steps: int = STEPS) -> dict:
    """One process, AdamW on the whole global batch: final parameters, m + v bytes, and the size of the
    key-bias gradient next to the query-bias gradient on the first step."""
    model = seeded_model(cfg, device)
    opt = torch.optim.AdamW(model.parameters(), **ADAMW)
    masks = bias_masks(model)
    for step in range(steps):
        x, y = global_batch(cfg, step, world, device)
        opt.zero_grad(set_to_none=True)
        model(x, y).backward()
        if step == 0:
            g = torch.cat([p.grad.reshape(-1).float().cpu() for p in model.parameters()]).abs()
            ratio = float(g[masks["key"]].max() / g[masks["query"]].max())
        opt.step()
    mv = sum(s[k].untyped_storage().nbytes() for s in opt.state.values() for k in ("exp_avg", "exp_avg_sq"))
    params = _params_vector(model)
    return {
        "params": params,
        "mv_bytes": mv,
        "key_bias_grad_ratio": ratio,
        "key": masks["key"],
        "max_abs_param": float(params.abs().max()),
    }


def world_for(device: str, name: str, cpu_world: int) -> int:
    """`cpu_world` gloo processes on CPU; on CUDA one rank per visible GPU, at least two."""
    world = cpu_world if device == "cpu" else torch.cuda.device_count()
    if world < 2:
        raise ValueError(f"{name} needs at least 2 ranks (one GPU each); {world} visible")
    return world


def fp32_tolerance(ref: dict, device: str) -> float:
    """16 fp32 ulps of the largest weight on CPU: sharding only changes the order in which the cross-rank
    gradient sum adds, a few roundings. On GPUs 100x that: other matmul kernels for another batch size."""
    return (16 if device == "cpu" else 1600) * torch.finfo(torch.float32).eps * ref["max_abs_param"]


def param_diffs(params: torch.Tensor, ref: dict) -> tuple[float, float]:
    """(max |Δ| over every parameter but the key biases, max |Δ| over the key biases) vs the reference."""
    d = (params - ref["params"]).abs()
    return float(d[~ref["key"]].max()), float(d[ref["key"]].max())


def equivalence_claims(r: Result, label: str, key: str, params_per_rank: list, ref: dict, tol: float) -> float:
    """Claims that every rank's final parameters equal the single process's (key biases apart: they may
    differ by up to lr per step, see bias_masks) and equal each other bit for bit. Returns the max |Δ|."""
    diffs = [param_diffs(p, ref) for p in params_per_rank]
    rest, keyb = max(d[0] for d in diffs), max(d[1] for d in diffs)
    r.add(f"{key}_max_diff", rest, "", f"{label}: max |param - one process| (all but the key biases)")
    r.add(f"{key}_key_bias_diff", keyb, "", f"{label}: max |param - one process| over the key biases")
    r.claim(
        f"{label}: parameters = one process on the global batch",
        rest,
        0.0,
        abs_tol=tol,
        formula=f"max |Δ| over {int((~ref['key']).sum()):,} parameters after {STEPS} AdamW steps",
    )
    r.claim(
        f"{label}: key biases within Adam's step bound",
        keyb,
        2 * ADAMW["lr"] * STEPS,
        relation="<=",
        formula="two opposite steps of at most lr per step (rounding-noise gradient)",
    )
    spread = max(float((p - params_per_rank[0]).abs().max()) for p in params_per_rank)
    r.claim(f"{label}: every rank holds the same parameters", spread, 0.0, formula="bit-exact after the all-gather")
    return rest
