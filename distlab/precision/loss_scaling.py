"""Loss scaling for fp16 training (Micikevicius et al. 2018, "Mixed Precision Training",
https://arxiv.org/abs/1710.03740, Section 3.2): gradients smaller than fp16's smallest subnormal flush
to zero unless the loss is multiplied by a scale S before backward (and the gradients divided by S
after, in fp32). Too large an S overflows to inf; a dynamic scaler finds the largest S that does not,
skipping any step whose gradients hold inf or NaN.

Measured on a real model: distlab.models.gpt's small model run in fp16, against the same model in fp32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from distlab.core.experiments import experiment
from distlab.core.results import Quantity, Result
from distlab.precision.number_formats import CFG, capture, concat_flat, counting_batch, flushed, fmt, small_model
from distlab.runtime.threads import single_threaded


@dataclass
class DynamicLossScaler:
    """Multiply the loss by `scale`. After a step whose gradients hold inf/NaN: skip the step, multiply
    the scale by backoff_factor. After growth_interval clean steps in a row: multiply it by growth_factor.
    The rule of torch.amp.GradScaler (whose update kernel is torch._amp_update_scale_)."""

    scale: float = 2.0**16
    """The current loss scale S."""
    growth_factor: float = 2.0
    """Applied after growth_interval clean steps."""
    backoff_factor: float = 0.5
    """Applied after an overflow."""
    growth_interval: int = 2000
    """Clean steps in a row before the scale grows."""
    clean_steps: int = 0
    """Clean steps since the last change."""

    def __post_init__(self) -> None:
        if not (self.scale > 0 and self.growth_factor > 1 and 0 < self.backoff_factor < 1 and self.growth_interval > 0):
            raise ValueError("need scale > 0, growth_factor > 1, 0 < backoff_factor < 1, growth_interval > 0")

    def update(self, found_inf: bool) -> None:
        if found_inf:
            self.scale *= self.backoff_factor
            self.clean_steps = 0
            return
        self.clean_steps += 1
        if self.clean_steps == self.growth_interval:
            self.scale *= self.growth_factor
            self.clean_steps = 0


def torch_scale_trace(found_infs: list[bool], init: float, growth_interval: int) -> list[float]:
    """The scales torch.amp.GradScaler's update kernel produces for the same overflow history."""
    scale, tracker = torch.tensor([init]), torch.zeros(1, dtype=torch.int32)
    out = []
    for found in found_infs:
        torch._amp_update_scale_(scale, tracker, torch.tensor([float(found)]), 2.0, 0.5, growth_interval)
        out.append(scale.item())
    return out


DIVISORS = (1, 16, 256)  # the loss divided as gradient accumulation over that many micro-batches does
STATIC = (1.0, 2.0**12, 2.0**24)  # static loss scales: none, moderate, too large
UNDERFLOW_BATCH = 8
INIT_SCALE, INTERVAL, STEPS, TRAIN_BATCH, LR = 2.0**32, 8, 32, 2, 1e-3  # the dynamic scaler's training run


def scale_label(s: float, prefix: str = "2^") -> str:
    """A static scale's label: none for 1, else prefix + its log2 (the static scales are powers of two)."""
    k = int(math.log2(s))
    return f"{prefix}{k}" if k else "none"


def underflow(
    divisor: float, scale: float, *, batch: int = UNDERFLOW_BATCH, device: str = "cpu", ref: dict | None = None
) -> dict:
    """Gradients of the fp16 model with the loss divided by `divisor` and multiplied by `scale`, against
    the fp32 model (`ref`, the same capture in fp32, when given): the share of nonzero gradient values
    flushed to zero, and the non-finite count of both."""
    x, y = counting_batch(batch, device=device)
    ref = ref or capture(small_model(device=device), x, y, loss_divisor=divisor)
    half = capture(small_model(dtype=torch.float16, device=device), x, y, loss_divisor=divisor, loss_scale=scale)
    out, grads = {"reference": ref}, []
    for kind in ("activation_grads", "param_grads"):
        a, q = concat_flat(ref[kind]), concat_flat(half[kind])
        out[kind] = flushed(a, torch.where(torch.isfinite(q), q, 1.0))
        grads.append(q)
    out["nonfinite"] = int((~torch.isfinite(torch.cat(grads))).sum())
    return out


def train(
    steps: int,
    scaler: DynamicLossScaler,
    *,
    divisor: float = 16,
    batch: int = TRAIN_BATCH,
    lr: float = LR,
    device: str = "cpu",
) -> list[dict]:
    """fp16 forward and backward, fp32 master weights and AdamW (the recipe of Micikevicius et al.).
    A step whose scaled gradients hold inf/NaN is skipped: no update, the scale backs off."""
    model = small_model(dtype=torch.float16, device=device)
    params = list(model.parameters())
    master = [p.detach().float().clone().requires_grad_(True) for p in params]
    opt = torch.optim.AdamW(master, lr=lr)
    trace = []
    for step in range(steps):
        x, y = counting_batch(batch, seed=step, device=device)
        model.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten()) / divisor
        (loss * scaler.scale).backward()
        found_inf = not all(bool(torch.isfinite(p.grad).all()) for p in params)
        before = [m.detach().clone() for m in master]
        if not found_inf:
            for m, p in zip(master, params):
                m.grad = p.grad.float() / scaler.scale  # unscale in fp32
            opt.step()
            with torch.no_grad():
                for m, p in zip(master, params):
                    p.copy_(m)
        moved = max(float((m.detach() - b).abs().max()) for m, b in zip(master, before))
        trace.append(
            {"step": step, "scale": scaler.scale, "found_inf": found_inf, "moved": moved, "loss": loss.item() * divisor}
        )
        scaler.update(found_inf)
        trace[-1]["next_scale"] = scaler.scale
    optimizer_steps = int(opt.state[master[0]]["step"]) if opt.state else 0
    trace.append({"optimizer_steps": optimizer_steps})
    return trace


@experiment(
    "loss-scaling",
    "fp16 gradients of a real model: underflow without scaling, with a static scale, and "
    "a dynamic scaler that skips overflowing steps",
)
@single_threaded
def loss_scaling(device: str) -> Result:
    r = Result("loss-scaling")
    rows, measured = [], {}
    for d in DIVISORS:
        ref = None
        for s in STATIC:
            u = measured[(d, s)] = underflow(d, s, device=device, ref=ref)
            ref = u["reference"]
            rows.append(
                [
                    d,
                    scale_label(s),
                    Quantity(u["activation_grads"], "fraction"),
                    Quantity(u["param_grads"], "fraction"),
                    u["nonfinite"],
                ]
            )
    r.table(
        "underflow",
        [
            "loss divided by",
            "loss scale S",
            "activation gradients flushed",
            "parameter gradients flushed",
            "inf/NaN values",
        ],
        rows,
        caption="Share of the nonzero fp32 gradient values that are zero in the fp16 model's backward "
        f"(batch {UNDERFLOW_BATCH}; activation gradients: the output gradients of every linear layer in the blocks)",
    )
    mid = 16
    none, static = (measured[(mid, s)] for s in STATIC[:2])
    r.claim(
        f"loss / {mid}, no scale: fp16 flushes activation gradients",
        none["activation_grads"],
        0.05,
        relation=">=",
        unit="fraction",
        formula="at least 5 %",
    )
    mid_log2, big_log2 = (int(math.log2(s)) for s in STATIC[1:])
    r.claim(
        f"loss / {mid}, S = 2^{mid_log2}: flushed activation gradients cut to near zero",
        static["activation_grads"],
        0.005,
        relation="<=",
        unit="fraction",
        formula="at most 0.5 %",
    )
    r.claim(
        f"loss / 1, S = 2^{big_log2}: the scaled gradients overflow",
        measured[(1, STATIC[2])]["nonfinite"],
        1,
        relation=">=",
        formula="at least one inf/NaN",
    )
    for d in DIVISORS:
        for s in STATIC:
            tag = scale_label(s, "s")
            r.add(
                f"act_flushed_d{d}_{tag}",
                measured[(d, s)]["activation_grads"],
                "fraction",
                f"loss / {d}, scale {s:g}: activation gradients flushed",
            )
            r.add(
                f"param_flushed_d{d}_{tag}",
                measured[(d, s)]["param_grads"],
                "fraction",
                f"loss / {d}, scale {s:g}: parameter gradients flushed",
            )
    r.add("mid_divisor", mid, "", "the loss divisor of the claims and the training run")
    r.add("big_divisor", DIVISORS[-1], "", "the largest loss divisor")
    r.add("mid_scale_log2", mid_log2, "", "log2 of the moderate static scale")
    r.add("big_scale_log2", big_log2, "", "log2 of the large static scale")
    r.add(
        "big_nonfinite_d1",
        measured[(1, STATIC[2])]["nonfinite"],
        "",
        f"loss / 1, S = 2^{big_log2}: non-finite gradient values (activations and parameters)",
    )

    scaler = DynamicLossScaler(scale=INIT_SCALE, growth_interval=INTERVAL)
    trace = train(STEPS, scaler, divisor=mid, device=device)
    opt_steps, trace = trace[-1]["optimizer_steps"], trace[:-1]
    skipped = [t for t in trace if t["found_inf"]]
    applied = [t for t in trace if not t["found_inf"]]
    r.claim(
        "every overflowing step was skipped: master weights unchanged (largest change)",
        max(t["moved"] for t in skipped) if skipped else -1,
        0,
    )
    r.claim(
        "every clean step was applied (smallest change of any master weight > 0)",
        min(t["moved"] for t in applied) > 0,
        True,
    )
    r.claim("optimizer steps = clean steps", opt_steps, len(applied))
    r.claim("the scaler backed off at least once", len(skipped), 1, relation=">=")
    r.claim(
        "step 0's loss ≈ ln(vocabulary), as at any near-uniform init",
        trace[0]["loss"],
        math.log(CFG.vocab),
        rel_tol=0.01,
        formula="logits near 0 at init; within 1 %",
    )
    ours = [t["next_scale"] for t in trace]
    theirs = torch_scale_trace([t["found_inf"] for t in trace], INIT_SCALE, INTERVAL)
    r.claim(
        "scale history = torch.amp.GradScaler's update rule (steps that differ)",
        sum(a != b for a, b in zip(ours, theirs)),
        0,
    )
    settled = trace[-1]["next_scale"]
    final = underflow(mid, settled, device=device, ref=measured[(mid, 1.0)]["reference"])
    r.claim(
        f"loss / {mid}, at the dynamic scaler's last scale: flushed activation gradients",
        final["activation_grads"],
        0.001,
        relation="<=",
        unit="fraction",
        formula="at most 0.1 %",
    )
    r.add("steps", STEPS, "", "training steps")
    r.add("skipped", len(skipped), "", "steps skipped on overflow")
    r.add("first_clean_step", applied[0]["step"] if applied else -1, "", "first step applied")
    r.add("init_scale_log2", int(math.log2(INIT_SCALE)), "", "log2 of the initial scale")
    r.add("interval", INTERVAL, "", "growth interval")
    r.add("final_scale_log2", math.log2(settled), "", "log2 of the scale after the last step")
    r.add("final_flushed", final["activation_grads"], "fraction", "activation gradients flushed at that scale")
    r.add("first_loss", trace[0]["loss"], "", "loss at step 0")
    r.add("last_loss", trace[-1]["loss"], "", "loss at the last step")
    grads = concat_flat(measured[(mid, 1.0)]["reference"]["activation_grads"]).double()
    grads = grads[grads != 0].abs()
    logs = torch.log2(grads)
    shifted = logs + math.log2(settled)
    r.claim(
        "figure: log2 |g| shifted by log2 S = log2 |g · S| (largest difference)",
        (shifted - torch.log2(grads * settled)).abs().max(),
        0,
        abs_tol=1e-12,
        formula="S a power of two: g · S is exact; float64 log2 rounding only",
    )
    _figure(r, logs, shifted, settled, trace, mid)
    return r


def _figure(
    r: Result, logs: torch.Tensor, shifted: torch.Tensor, scale: float, trace: list[dict], divisor: int
) -> None:
    """Left: histograms of log2 |gradient| before and after the scale; right: the scaler's history."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fp16 = fmt("fp16").layout()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    bins = list(range(-50, 18))
    ax1.hist(logs.cpu().numpy(), bins=bins, alpha=0.6, label="fp32 activation gradients")
    ax1.hist(shifted.cpu().numpy(), bins=bins, alpha=0.6, label=f"× S = 2^{math.log2(scale):g}")
    for value, label, style in (
        (fp16["min_subnormal"], "fp16 min subnormal", "--"),
        (fp16["min_normal"], "fp16 min normal", ":"),
        (fp16["max"], "fp16 max", "-"),
    ):
        ax1.axvline(math.log2(value), color="k", ls=style, lw=1, label=label)
    ax1.set_xlabel("log2 |gradient|")
    ax1.set_ylabel("values")
    ax1.set_title(f"activation gradients, loss / {divisor}", fontsize=9)
    ax1.legend(fontsize=7)
    steps = [t["step"] for t in trace]
    ax2.step(steps, [math.log2(t["scale"]) for t in trace], where="post", label="log2 S used")
    bad = [t for t in trace if t["found_inf"]]
    ax2.plot([t["step"] for t in bad], [math.log2(t["scale"]) for t in bad], "rx", label="overflow: step skipped")
    ax2.set_xlabel("step")
    ax2.set_ylabel("log2 loss scale")
    ax2.set_title("dynamic loss scaler", fontsize=9)
    ax2.legend(fontsize=7)
    r.figure(
        "scaling",
        fig,
        "Left: where fp16 loses gradients (left of the dashed line) and where the loss scale "
        "moves them. Right: the dynamic scaler backs off on overflow and grows after "
        f"{INTERVAL} clean steps (batch {TRAIN_BATCH}, AdamW lr {LR:g})",
    )
