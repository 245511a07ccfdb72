"""Why mixed precision keeps fp32 master weights: an update smaller than half the gap from a bf16 weight to
its next value rounds away, on every step, however many steps there are.

bf16 has 7 mantissa bits, so the gap above a weight w in [2^e, 2^(e+1)) is 2^(e-7): an update below
|w|/512 is always lost, and one below |w|/256 may be. An fp32 master copy (23 mantissa bits) adds it up;
the bf16 weight the forward pass reads is then rounded from the master.

Measured twice on chapter 1's small model: a constant small update applied to every real initial weight,
and real AdamW training with the update applied to bf16 weights directly vs through fp32 masters.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from distlab.core.experiments import experiment
from distlab.core.results import Quantity, Result
from distlab.precision.number_formats import counting_batch, small_model
from distlab.runtime.threads import single_threaded


def lost_from(delta: float) -> float:
    """The smallest power of two x (in bf16) for which x + delta rounds back to x, found by trying them."""
    for k in range(-30, 31):
        x = torch.tensor(2.0**k, dtype=torch.bfloat16)
        if (x + torch.tensor(delta, dtype=torch.bfloat16)).item() == x.item():
            return 2.0**k
    raise ValueError(f"no power of two below 2^30 loses an update of {delta}")


DELTA, STEPS = 1e-4, 500  # a constant update (not a dyadic number: no rounding ties) and how often
TRAIN_STEPS, LR, BATCH = 50, 1e-3, 4


def gap_up(w: torch.Tensor) -> torch.Tensor:
    """Distance from each bf16 value to the next bf16 value towards +inf (float64)."""
    return torch.nextafter(w, torch.full_like(w, float("inf"))).double() - w.double()


def constant_updates(w0: torch.Tensor, delta: float = DELTA, steps: int = STEPS) -> dict:
    """Add `delta` `steps` times: to bf16 weights directly, to fp32 master weights (read back as bf16),
    and in float64 (the reference)."""
    direct = w0.to(torch.bfloat16)
    master = w0.float().clone()
    for _ in range(steps):
        direct = direct + delta  # bf16 + float -> rounded to bf16
        master = master + delta
    exact = w0.double() + steps * delta
    start = w0.to(torch.bfloat16)
    return {
        "direct": direct,
        "master": master,
        "exact": exact,
        "never_moved": direct == start,
        "predicted_stuck": delta < gap_up(start) / 2,
    }


def train(master: bool, *, steps: int = TRAIN_STEPS, lr: float = LR, device: str = "cpu") -> dict:
    """AdamW on the bf16 model: applied to the bf16 weights themselves (optimizer state in bf16 too), or
    to fp32 master weights copied back to bf16 after each step."""
    model = small_model(dtype=torch.bfloat16, device=device)
    params = list(model.parameters())
    start = [p.detach().clone() for p in params]
    masters = [p.detach().float().clone().requires_grad_(True) for p in params] if master else None
    opt = torch.optim.AdamW(masters if master else params, lr=lr)
    losses = []
    for step in range(steps):
        x, y = counting_batch(BATCH, seed=step, device=device)
        model.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())
        loss.backward()
        losses.append(loss.item())
        if master:
            for m, p in zip(masters, params):
                m.grad = p.grad.float()
        opt.step()
        if master:
            with torch.no_grad():
                for m, p in zip(masters, params):
                    p.copy_(m)
    changed = {name: p != s for (name, p), s in zip(model.named_parameters(), start)}
    moved = {}
    for name, p in model.named_parameters():
        group = _group(name, p)
        count, total = moved.get(group, (0, 0))
        moved[group] = (count + int(changed[name].sum()), total + p.numel())
    return {"losses": losses, "moved": {g: c / n for g, (c, n) in moved.items()}, "changed": changed, "model": model}


MATRICES, GAINS, BIASES = "matrices and embeddings (N(0, 0.02))", "LayerNorm gains (1.0)", "biases (0)"


def _group(name: str, p: torch.Tensor) -> str:
    if p.dim() >= 2:
        return MATRICES
    return GAINS if ("ln" in name and name.endswith("weight")) else BIASES


def groups_by_module(model: nn.Module) -> dict[str, list[str]]:
    """The same three groups from each parameter's module type instead of its shape and name (a second route,
    for the claims): a bias, a LayerNorm's weight, a Linear's or Embedding's weight (a tied one once)."""
    out: dict[str, list[str]] = {}
    seen = set()
    for prefix, mod in model.named_modules():
        for leaf, p in mod.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            if leaf == "bias":
                group = BIASES
            elif isinstance(mod, nn.LayerNorm):
                group = GAINS
            elif isinstance(mod, (nn.Linear, nn.Embedding)):
                group = MATRICES
            else:
                raise ValueError(f"no group for {prefix}.{leaf} in {type(mod).__name__}")
            out.setdefault(group, []).append(f"{prefix}.{leaf}" if prefix else leaf)
    return out


def stuck_closed_form(w: torch.Tensor, delta: float) -> torch.Tensor:
    """bf16 weights an update of delta never moves, from the gap written out: above w in [2^e, 2^(e+1)) the
    next bf16 value is 2^(e-7) away, and above a negative power of two -2^e (towards 0) 2^(e-8)."""
    w = w.double()
    e = torch.floor(torch.log2(w.abs()))
    gap = torch.where((w < 0) & (w.abs() == torch.exp2(e)), torch.exp2(e - 8), torch.exp2(e - 7))
    return (w != 0) & (delta < gap / 2)


@experiment(
    "master-weights", "small updates applied to bf16 weights vs to fp32 master weights: the bf16 weight stagnates"
)
@single_threaded
def master_weights(device: str) -> Result:
    r = Result("master-weights")
    model = small_model(device=device)
    rows, all_moved, all_pred, master_err, closed_form_diff = [], 0, 0, 0.0, 0.0
    params, by_module = dict(model.named_parameters()), groups_by_module(model)
    groups: dict[str, list[torch.Tensor]] = {}
    for name, p in model.named_parameters():
        groups.setdefault(_group(name, p), []).append(p.detach().flatten())
    for group, tensors in groups.items():
        out = constant_updates(torch.cat(tensors))
        stuck, pred = int(out["never_moved"].sum()), int(out["predicted_stuck"].sum())
        all_moved, all_pred = all_moved + stuck, all_pred + pred
        n = out["exact"].numel()
        err_direct = (out["direct"].double() - out["exact"]).abs().mean().item()
        err_master = (out["master"].double() - out["exact"]).abs().max().item()
        master_err = max(master_err, err_master)
        stuck_share, pred_share = stuck / n, pred / n
        rows.append(
            [group, n, Quantity(stuck_share, "fraction"), Quantity(pred_share, "fraction"), err_direct, err_master]
        )
        w0 = torch.cat([params[k].flatten() for k in by_module.get(group, [])]).bfloat16()
        closed = stuck_closed_form(w0, DELTA).double().mean().item() if w0.numel() else -1.0
        closed_form_diff = max(closed_form_diff, abs(stuck_share - closed), abs(pred_share - closed))
        if group.startswith("matrices"):
            r.add("matrix_stuck", stuck_share, "fraction", "matrix entries that never moved in bf16")
        if group.startswith("LayerNorm"):
            r.claim(
                f"bf16 LayerNorm gains after {STEPS} updates of {DELTA:g}: still exactly 1 (largest change)",
                (out["direct"].double() - 1).abs().max().item(),
                0,
            )
            r.add("ln_direct", out["direct"][0].item(), "", "a bf16 LayerNorm gain after the updates")
            r.add("ln_master", out["master"][0].item(), "", "the same gain through an fp32 master")
    r.table(
        "constant",
        [
            "weights",
            "elements",
            "never moved in bf16",
            "predicted: update < half the gap",
            "bf16 weights: mean abs. error",
            "fp32 masters: largest abs. error",
        ],
        rows,
        caption=f"Every initial weight of the small model, plus {DELTA:g} added {STEPS} times; error against float64",
    )
    r.claim(
        "bf16 weights that never moved = those whose update is below half the gap to the next bf16 value",
        all_moved,
        all_pred,
    )
    r.claim("never moved, per group = closed-form gap rule (largest difference)", closed_form_diff, 0)
    r.claim(
        "elements per group = count by module type (groups that differ)",
        sum(row[1] != sum(params[k].numel() for k in by_module.get(row[0], [])) for row in rows),
        0,
    )
    r.claim(
        "bf16 mean error ≤ the updates' sum (a rounding loses at most one update)",
        max(row[4] for row in rows),
        STEPS * DELTA,
        relation="<=",
        abs_tol=1e-12,
        formula="float64 rounding of w0 + the sum",
    )
    bound = STEPS * 2.0**-24 * 1.1  # STEPS roundings of at most half an fp32 ulp of values below 1.1
    r.claim(
        "fp32 masters track the float64 sum (largest |error|)",
        master_err,
        bound,
        relation="<=",
        formula=f"at most {STEPS} × half an fp32 ulp at 1.1",
    )
    r.add("delta", DELTA, "", "the update")
    r.add("steps", STEPS, "", "updates applied")
    r.add("total", DELTA * STEPS, "", "the sum of the updates")
    threshold = lost_from(DELTA)
    r.add("threshold", threshold, "", f"the smallest power of two at which a {DELTA:g} update is lost in bf16")
    r.claim(
        f"bf16 loses a {DELTA:g} update from 2^-5 on (hand-worked: half the gap at 2^k is 2^(k-8) > {DELTA:g})",
        threshold,
        2.0**-5,
        formula="2^(k-8) > 1e-4 first at k = -5 (2^-13 = 1.22e-4)",
    )

    runs = {m: train(m, device=device) for m in (False, True)}
    groups_out = list(runs[True]["moved"])
    r.table(
        "training",
        ["weights", "moved from init, AdamW on bf16 weights", "moved from init, fp32 masters"],
        [
            [g, Quantity(runs[False]["moved"][g], "fraction"), Quantity(runs[True]["moved"][g], "fraction")]
            for g in groups_out
        ],
        caption=f"{TRAIN_STEPS} AdamW steps at lr {LR:g}, batch {BATCH}, on the counting task ({device})",
    )
    recount = {
        (m, g): torch.cat([runs[m]["changed"][k].flatten() for k in names]).double().mean().item()
        for m in (False, True)
        for g, names in groups_by_module(runs[m]["model"]).items()
    }
    r.claim(
        "training table = recount by module type (largest difference)",
        max(abs(runs[m]["moved"].get(g, -1.0) - share) for (m, g), share in recount.items()),
        0,
    )
    ln = "LayerNorm gains (1.0)"
    r.claim(
        f"AdamW on bf16 weights: LayerNorm gains never move in {TRAIN_STEPS} steps",
        runs[False]["moved"][ln],
        0,
        unit="fraction",
    )
    r.claim(
        "AdamW through fp32 masters: most LayerNorm gains move",
        runs[True]["moved"][ln],
        0.5,
        relation=">=",
        unit="fraction",
    )
    r.add("lr", LR, "", "AdamW learning rate")
    r.add("train_steps", TRAIN_STEPS, "", "training steps")
    r.add("ln_moved_master", runs[True]["moved"][ln], "fraction", "LayerNorm gains moved with masters")
    r.add("loss_direct", runs[False]["losses"][-1], "", "final loss, AdamW on bf16 weights")
    r.add("loss_master", runs[True]["losses"][-1], "", "final loss, fp32 masters")
    one = torch.tensor(1.0, dtype=torch.bfloat16)
    half_gap = (torch.nextafter(one, torch.tensor(2.0, dtype=torch.bfloat16)).float() - 1).item() / 2
    r.add("half_gap_at_one", half_gap, "", "half the bf16 gap above 1.0")
    r.claim("half the bf16 gap above 1.0 = 2^-8 (7 mantissa bits)", half_gap, 2.0**-8)
    _figure(r, runs)
    return r


def _figure(r: Result, runs: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    ax.plot(runs[False]["losses"], label="AdamW on bf16 weights")
    ax.plot(runs[True]["losses"], label="fp32 master weights")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.legend(fontsize=8)
    r.figure("training", fig, f"The small model learning to count, lr {LR:g}: bf16-only updates against fp32 masters")
