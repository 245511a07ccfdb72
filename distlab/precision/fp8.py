"""fp8 numerics on real activations and gradients: why per-tensor scaling, why e4m3 forward and e5m2
backward, and what saturation does that overflow does not.

Micikevicius et al. 2022, "FP8 Formats for Deep Learning" (https://arxiv.org/abs/2209.05433): e4m3 has
3 mantissa bits and about 18 binades of range, e5m2 2 mantissa bits and about 32. A tensor is multiplied
by a scale before the cast so that its largest magnitude (amax) lands near the format's max, and divided
by it after. Transformer Engine's delayed scaling takes the scale from the largest amax of the last few
steps (an amax history) instead of the current tensor, so the cast needs no extra pass over the data; a
value that has outgrown the history is saturated (clamped to max), not turned into inf.

Real tensors: the inputs (activations) and output gradients (activation gradients) of every linear
layer in the blocks of chapter 1's small model, over the first steps of training it.
"""

from __future__ import annotations

import math
from collections import deque

import torch

from distlab.core.experiments import experiment
from distlab.core.results import Quantity, Result
from distlab.precision.number_formats import capture, counting_batch, fmt, small_model
from distlab.runtime.threads import single_threaded

E4M3, E5M2 = fmt("fp8 e4m3"), fmt("fp8 e5m2")
STEPS, HISTORY, LR, BATCH = 8, 16, 1e-3, 8  # the run the page chooses


def quantize(x: torch.Tensor, dtype: torch.dtype, scale: float = 1.0, *, saturate: bool = True) -> torch.Tensor:
    """x * scale, clamped to the format's range when saturating, cast to fp8, back to fp32, / scale."""
    top = torch.finfo(dtype).max
    y = x * scale
    if saturate:
        y = y.clamp(-top, top)
    return y.to(dtype).float() / scale


def amax_scale(amax: float, dtype: torch.dtype) -> float:
    """The per-tensor scale that maps amax to the format's max (1 for an all-zero tensor)."""
    return torch.finfo(dtype).max / amax if amax > 0 else 1.0


class DelayedScaling:
    """One tensor's scale from the largest amax over the last `length` steps (Transformer Engine's
    DelayedScaling with amax_compute_algo="max", margin 0). `scale()` before the cast, `record()` after."""

    def __init__(self, dtype: torch.dtype, length: int = HISTORY):
        self.dtype, self.history = dtype, deque(maxlen=length)

    def amax(self) -> float:
        """The largest amax in the history (the format's max, i.e. scale 1, before the first record)."""
        return max(self.history) if self.history else torch.finfo(self.dtype).max

    def scale(self) -> float:
        return amax_scale(self.amax(), self.dtype)

    def record(self, x: torch.Tensor) -> None:
        self.history.append(x.abs().max().item())


def training_tensors(steps: int = STEPS, device: str = "cpu") -> list[dict]:
    """Per step of AdamW training (fp32): the activations and activation gradients of every linear layer."""
    model = small_model(device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    out = []
    for step in range(steps):
        x, y = counting_batch(BATCH, seed=step, device=device)
        t = capture(model, x, y)
        out.append({"activations": t["activations"], "gradients": t["activation_grads"]})
        opt.step()
    return out


class Stats:
    """Error, flushed-to-zero and saturated counts of one (tensor kind, format, scaling) over many tensors."""

    def __init__(self):
        self.err2 = self.norm2 = 0.0
        self.flushed = self.saturated = self.nonzero = self.values = 0

    def add(self, x: torch.Tensor, q: torch.Tensor, limit: float) -> None:
        """x quantized to q with the scale that maps `limit` (an amax) to the format's max."""
        self.err2 += float(((q.double() - x.double()) ** 2).sum())
        self.norm2 += float((x.double() ** 2).sum())
        nonzero = x != 0
        self.nonzero += int(nonzero.sum())
        self.values += x.numel()
        self.flushed += int(((q == 0) & nonzero).sum())
        self.saturated += int((x.abs() > limit).sum())

    def cells(self) -> tuple[float, float, float]:
        """Relative error ‖q − x‖ / ‖x‖, share of the nonzero values flushed, share of all values saturated."""
        return (self.err2 / self.norm2) ** 0.5, self.flushed / max(1, self.nonzero), self.saturated / self.values

    def row(self) -> list:
        err, flushed, saturated = self.cells()
        return [err, Quantity(flushed, "fraction"), Quantity(saturated, "fraction")]


def binades(x: torch.Tensor, quantile: float = 0.001) -> float:
    """log2(amax / the `quantile` quantile of the nonzero magnitudes): the range a format must cover."""
    mags = x.abs().flatten()
    mags = mags[mags > 0]
    k = max(1, int(quantile * mags.numel()))
    return float(torch.log2(mags.max() / mags.kthvalue(k).values))


@experiment(
    "fp8-scaling",
    "fp8 e4m3/e5m2 on real activations and gradients: no scaling, per-tensor amax, "
    "delayed scaling with an amax history; saturation vs overflow",
)
@single_threaded
def fp8_scaling(device: str) -> Result:
    r = Result("fp8-scaling")
    steps = training_tensors(device=device)
    cur, late = "per-tensor amax (current)", f"delayed (amax history of {HISTORY})"
    stats = {}
    for kind in ("activations", "gradients"):
        for f in (E4M3, E5M2):
            delayed = [DelayedScaling(f.dtype) for _ in steps[0][kind]]
            for step, tensors in enumerate(steps):
                for i, x in enumerate(tensors[kind]):
                    limits = {"none": torch.finfo(f.dtype).max, cur: x.abs().max().item(), late: delayed[i].amax()}
                    delayed[i].record(x)
                    if step == 0:
                        continue  # the history's first entry: delayed scaling has nothing to go on yet
                    for scheme, limit in limits.items():
                        q = quantize(x, f.dtype, amax_scale(limit, f.dtype))
                        stats.setdefault((kind, f.name, scheme), Stats()).add(x, q, limit)
    r.table(
        "errors",
        ["tensor", "format", "scaling", "relative error", "flushed to zero", "saturated"],
        [[k, fm, sc, *s.row()] for (k, fm, sc), s in stats.items()],
        caption=f"Activations and activation gradients of every linear layer in the blocks, steps 2 to {STEPS} "
        f"of training the small model (AdamW, lr {LR:g}, batch {BATCH}); relative error = ‖q − x‖ / ‖x‖",
    )
    rederived = {key: cell for f in (E4M3, E5M2) for key, cell in _cells_rederived(steps, f, late).items()}
    r.claim(
        "errors table = second route: amax matrix, per-tensor float64 norms (max rel. diff.)",
        max(_rel_diff(a, b) for key, s in stats.items() for a, b in zip(s.cells(), rederived[key])),
        0,
        abs_tol=1e-9,
        formula="floating-point summation order only",
    )

    def get(kind, f, scheme):
        return stats[(kind, f.name, scheme)].cells()

    g_none, g_cur = get("gradients", E4M3, "none"), get("gradients", E4M3, cur)
    r.claim(
        "gradients in e4m3 without a scale: flushed to zero",
        g_none[1],
        0.9,
        relation=">=",
        unit="fraction",
        formula="at least 90 %: they sit far below e4m3's smallest subnormal",
    )
    r.claim(
        "gradients in e4m3 with a per-tensor scale: relative error",
        g_cur[0],
        2.0**-4,
        relation="<=",
        formula="at most 2^-4, half an e4m3 ulp relative to the value",
    )
    a4, a5 = get("activations", E4M3, cur)[0], get("activations", E5M2, cur)[0]
    r.claim(
        "activations: e4m3's error / e5m2's (one more mantissa bit)",
        a4 / a5,
        0.75,
        relation="<=",
        formula="about 1/2; at most 0.75",
    )
    g4, g5 = get("gradients", E4M3, cur)[1], get("gradients", E5M2, cur)[1]
    r.claim(
        "gradients, per-tensor scale: e5m2 flushes no more than e4m3 (range)", g5, g4, relation="<=", unit="fraction"
    )
    d4 = get("gradients", E4M3, late)
    r.claim(
        "delayed scaling's error within 1.5 × the current-amax scale's (gradients, e4m3)",
        d4[0] / g_cur[0],
        1.5,
        relation="<=",
    )
    for (kind, fname, scheme), _ in stats.items():
        err, fl, sat = get(kind, fmt(fname), scheme)
        tag = f"{kind[:4]}_{fname[-4:]}_{ {'none': 'none', cur: 'amax'}.get(scheme, 'delayed') }"
        r.add(f"{tag}_error", err, "", f"{kind}, {fname}, {scheme}: relative error")
        r.add(f"{tag}_flushed", fl, "fraction", f"{kind}, {fname}, {scheme}: flushed")
        r.add(f"{tag}_saturated", sat, "fraction", f"{kind}, {fname}, {scheme}: saturated")

    last = steps[-1]
    ranges = {k: [binades(x) for x in last[k]] for k in ("activations", "gradients")}
    for k, vals in ranges.items():
        r.add(f"{k}_binades", max(vals), "", f"{k}: most binades from amax down to the 0.1 % quantile")
    r.claim(
        "activations span fewer binades than e4m3 covers",
        max(ranges["activations"]),
        _range(E4M3),
        relation="<=",
        formula="amax to the 0.1 % quantile of |x|, the widest tensor",
    )
    r.claim("gradients span more binades than e4m3 covers", max(ranges["gradients"]), _range(E4M3), relation=">=")
    r.add("e4m3_binades", _range(E4M3), "", "e4m3 range in binades")
    r.add("e5m2_binades", _range(E5M2), "", "e5m2 range in binades")
    r.add("steps", STEPS, "", "training steps")
    r.add("history", HISTORY, "", "amax history length")
    from distlab.core.facts import value

    r.claim(
        "the history set here is at most Transformer Engine's default amax_history_len (its docs)",
        HISTORY,
        value("fp8_recipes.TE-DelayedScaling.amax_history_len"),
        relation="<=",
        unit="steps",
    )
    _saturation(r, last["gradients"])
    return r


def _cells_rederived(steps: list[dict], f, late: str) -> dict:
    """The errors table's cells for format `f` by a second route: every tensor's amax in one (step x layer)
    matrix, delayed scaling's limit as a sliding max over its rows, the scaled cast written out, float64 norms
    per tensor combined with hypot. The casts are torch's; the bookkeeping is independent of Stats."""
    top = torch.finfo(f.dtype).max
    out = {}
    for kind in ("activations", "gradients"):
        amax = torch.tensor([[x.abs().max().item() for x in t[kind]] for t in steps], dtype=torch.float64)
        window = torch.stack([amax[max(0, s - HISTORY) : s].amax(0) for s in range(1, len(steps))])
        xs = [x for t in steps[1:] for x in t[kind]]
        norm = math.hypot(*(torch.linalg.vector_norm(x, dtype=torch.float64).item() for x in xs))
        nonzero, values = sum(int(x.count_nonzero()) for x in xs), sum(x.numel() for x in xs)
        for scheme, limits in (
            ("none", torch.full_like(window, top)),
            ("per-tensor amax (current)", amax[1:]),
            (late, window),
        ):
            errs, flushed, saturated = [], 0, 0
            for x, limit in zip(xs, limits.flatten().tolist()):
                scale = top / limit
                q8 = (x * scale).clamp(-top, top).to(f.dtype).float()
                errs.append(torch.linalg.vector_norm(q8 / scale - x, dtype=torch.float64).item())
                flushed += int(((q8 == 0) & (x != 0)).sum())
                saturated += int((x.abs() > limit).sum())
            out[(kind, f.name, scheme)] = (math.hypot(*errs) / norm, flushed / nonzero, saturated / values)
    return out


def _rel_diff(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b else abs(a)


def _range(f) -> float:
    lay = f.layout()
    return math.log2(lay["max"] / lay["min_subnormal"])


STALE = 16  # how much amax has grown since the history recorded it


def _saturation(r: Result, grads: list[torch.Tensor]) -> None:
    """A stale scale STALE times too large (amax grew since the history): saturate vs let it overflow."""
    x = torch.cat([g.flatten() for g in grads])
    amax = x.abs().max().item()
    scale = STALE * amax_scale(amax, E5M2.dtype)
    sat = quantize(x, E5M2.dtype, scale, saturate=True)
    raw = quantize(x, E5M2.dtype, scale, saturate=False)
    top = E5M2.layout()["max"]
    halfway = top + 2.0 ** (math.floor(math.log2(top)) - E5M2.mantissa_bits) / 2  # rounds up to inf from here
    over = (x.double() * scale).abs() >= halfway
    r.claim("a saturating cast keeps every value finite", int((~torch.isfinite(sat)).sum()), 0)
    r.claim(
        "a plain e5m2 cast turns every value past max + half a gap into inf",
        int(torch.isinf(raw).sum()),
        int(over.sum()),
        formula=f"|x · scale| ≥ {halfway:g}",
    )
    out_of_range = ((x.double() * scale).abs() > top).double().mean().item()
    error_saturated = ((sat.double() - x.double()).norm() / x.double().norm()).item()
    # Second route, float64 throughout: clamp x itself to amax / STALE (what the stale scale maps to max).
    limit = amax / STALE
    clamped = x.double().clamp(-limit, limit)
    ref = (clamped * (top / limit)).to(E5M2.dtype).double() * (limit / top)
    r.claim("stale scale: share beyond max = share of |x| > amax / STALE", out_of_range, (clamped != x).double().mean())
    r.claim(
        "stale scale: saturating cast's error = float64 clamp-then-cast",
        error_saturated,
        torch.dist(ref, x.double()) / torch.linalg.vector_norm(x.double()),
        rel_tol=1e-9,
        formula="float64 norms; the float32 product x · scale could only flip a tie",
    )
    r.add("stale_factor", STALE, "", "amax growth since the history")
    r.add("stale_out_of_range", out_of_range, "fraction", "values beyond max with the stale scale")
    r.add("stale_inf", int(torch.isinf(raw).sum()), "", "inf values without saturation")
    r.add("stale_error_saturated", error_saturated, "", "relative error, saturating")
    r.add("stale_norm_raw", float(raw.norm()), "", "norm of the overflowed tensor (inf poisons every sum)")
