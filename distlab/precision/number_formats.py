"""Floating-point formats of mixed-precision training, from their bit layouts and from torch; and where
bf16 and fp16 each fail on real tensors (fp16 on range, bf16 on precision).

A binary format with e exponent bits and m mantissa bits has bias 2^(e-1) - 1 and
    min normal = 2^(1 - bias)    min subnormal = 2^(1 - bias - m)    epsilon = 2^-m
    max = (2 - 2^-m) 2^(2^e - 2 - bias)          (IEEE: the top exponent is inf/NaN)
    max = (2 - 2^-(m-1)) 2^(2^e - 1 - bias)      (fp8 e4m3 "fn": no inf; only all-ones is NaN)
(IEEE 754-2008; Micikevicius et al. 2022, "FP8 Formats for Deep Learning", https://arxiv.org/abs/2209.05433).

The real tensors come from distlab.models.gpt's small model (chapter 1's) with GPT-2's initialisation
(N(0, 0.02) matrices, zero biases), on sequences that count upward from a random token, which it can learn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.models.gpt import GPT, GPTConfig
from distlab.runtime.threads import single_threaded


@dataclass(frozen=True)
class Format:
    name: str
    exponent_bits: int
    mantissa_bits: int
    dtype: torch.dtype | None
    """The torch dtype, or None for tf32 (a tensor-core compute mode, not a storage type)."""
    ieee: bool = True
    """Whether the top exponent is reserved for inf/NaN (False for e4m3fn)."""

    def layout(self) -> dict[str, float]:
        """The format's numbers from its bit layout alone."""
        e, m = self.exponent_bits, self.mantissa_bits
        bias = 2 ** (e - 1) - 1
        top = 2**e - 2 - bias if self.ieee else 2**e - 1 - bias
        largest_mantissa = 2 - 2.0**-m if self.ieee else 2 - 2.0 ** -(m - 1)
        return {
            "bits": 1 + e + m,
            "max": largest_mantissa * 2.0**top,
            "min_normal": 2.0 ** (1 - bias),
            "min_subnormal": 2.0 ** (1 - bias - m),
            "eps": 2.0**-m,
        }

    def from_torch(self) -> dict[str, float]:
        """The same numbers as torch reports them: torch.finfo, and the smallest subnormal as the value
        whose bit pattern is the integer 1."""
        fi = torch.finfo(self.dtype)
        ints = {8: torch.uint8, 16: torch.int16, 32: torch.int32}[fi.bits]
        tiny = torch.ones(1, dtype=ints).view(self.dtype).float().item()
        return {"bits": fi.bits, "max": fi.max, "min_normal": fi.smallest_normal, "min_subnormal": tiny, "eps": fi.eps}


FORMATS = [
    Format("fp32", 8, 23, torch.float32),
    Format("tf32", 8, 10, None),
    Format("fp16", 5, 10, torch.float16),
    Format("bf16", 8, 7, torch.bfloat16),
    Format("fp8 e4m3", 4, 3, torch.float8_e4m3fn, ieee=False),
    Format("fp8 e5m2", 5, 2, torch.float8_e5m2),
]
FIELDS = ("bits", "max", "min_normal", "min_subnormal", "eps")


def fmt(name: str) -> Format:
    for f in FORMATS:
        if f.name == name:
            return f
    raise ValueError(f"unknown format {name!r}; known: {', '.join(f.name for f in FORMATS)}")


# ---------------------------------------------------------------- real tensors
CFG = GPTConfig()  # chapter 1's small model: 2 layers, h = 64, 4 heads, vocab 512, sequence 64


def small_model(seed: int = 0, dtype: torch.dtype = torch.float32, device: str = "cpu") -> GPT:
    """distlab.models.gpt's small model with GPT-2's initialisation (matrices N(0, 0.02), biases 0, LayerNorm
    gains 1)."""
    torch.manual_seed(seed)
    model = GPT(CFG)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
            elif name.endswith("bias"):
                p.zero_()
    return model.to(device=device, dtype=dtype)


def counting_batch(batch: int, seed: int = 0, device: str = "cpu"):
    """Sequences that count upward (mod vocab) from a random token: a task the model can learn."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, CFG.vocab, (batch, 1), generator=g)
    data = (start + torch.arange(CFG.seq + 1)) % CFG.vocab  # (B, N + 1)
    return data[:, :-1].to(device), data[:, 1:].to(device)


def capture(
    model: GPT, x: torch.Tensor, y: torch.Tensor, *, loss_scale: float = 1.0, loss_divisor: float = 1.0
) -> dict:
    """One forward and backward of `model` (any dtype): fp32 copies of the inputs of every Linear inside
    the blocks (activations), of the gradients of their outputs (activation gradients, divided back by
    loss_scale), of the parameter gradients (likewise), and the per-token losses. The loss is divided by
    loss_divisor first, as gradient accumulation over that many micro-batches does."""
    acts, act_grads, handles = [], [], []
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear) and name.startswith("blocks"):
            handles.append(mod.register_forward_hook(lambda m, a, o: acts.append(a[0].detach().float())))
            handles.append(
                mod.register_full_backward_hook(lambda m, gi, go: act_grads.append(go[0].detach().float() / loss_scale))
            )
    model.zero_grad(set_to_none=True)
    logits = model(x)
    token_losses = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="none")
    (token_losses.mean() / loss_divisor * loss_scale).backward()
    for h in handles:
        h.remove()
    return {
        "activations": acts,
        "activation_grads": act_grads,
        "param_grads": [p.grad.detach().float() / loss_scale for p in model.parameters()],
        "token_losses": token_losses.detach(),
        "loss": token_losses.mean().item(),
    }


def concat_flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The tensors' values, one after another, as one 1-D tensor (dtype and device kept)."""
    return torch.cat([t.flatten() for t in tensors])


def cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round to `dtype` and back to fp32."""
    return x.to(dtype).float()


def flushed(x: torch.Tensor, q: torch.Tensor) -> float:
    """Share of the nonzero values of x that became zero in q."""
    nonzero = x != 0
    return ((q == 0) & nonzero).sum().item() / max(1, nonzero.sum().item())


def relative_error(x: torch.Tensor, q: torch.Tensor) -> float:
    """||q - x|| / ||x||, in float64."""
    return ((q.double() - x.double()).norm() / x.double().norm()).item()


# ---------------------------------------------------------------- experiments
@experiment(
    "number-formats",
    "fp32, tf32, fp16, bf16, fp8 e4m3 and e5m2: range and precision from torch.finfo vs the bit layout",
)
def number_formats(device: str) -> Result:
    r = Result("number-formats")
    rows = []
    for f in FORMATS:
        bits = f.layout()
        if f.dtype is None:
            rows.append(
                [
                    f"{f.name} (derived)",
                    f.exponent_bits,
                    f.mantissa_bits,
                    *(bits[k] for k in FIELDS[1:]),
                    math.log2(bits["max"] / bits["min_subnormal"]),
                ]
            )
            continue
        got = f.from_torch()
        matches = sum(got[k] == bits[k] for k in FIELDS)
        r.claim(
            f"{f.name}: torch's bits, max, min normal, min subnormal and epsilon = its bit layout",
            matches,
            len(FIELDS),
            formula=f"{f.exponent_bits} exponent bits, {f.mantissa_bits} mantissa bits",
        )
        rows.append(
            [
                f.name,
                f.exponent_bits,
                f.mantissa_bits,
                *(got[k] for k in FIELDS[1:]),
                math.log2(got["max"] / got["min_subnormal"]),
            ]
        )
        slug = f.name.replace("fp8 ", "")
        for k in ("max", "min_normal", "min_subnormal", "eps"):
            r.add(f"{slug}_{k}", got[k], "", f"{f.name} {k.replace('_', ' ')}")
        r.add(f"{slug}_binades", math.log2(got["max"] / got["min_subnormal"]), "", f"{f.name}: range in binades")
    r.table(
        "formats",
        [
            "format",
            "exponent bits",
            "mantissa bits",
            "max",
            "min normal",
            "min subnormal",
            "epsilon",
            "range (binades)",
        ],
        rows,
        caption="Read from torch.finfo (min subnormal: the value whose bits are the integer 1); tf32 from its "
        "layout, as torch has no tf32 type",
    )
    shown = [(f, row[-1]) for f, row in zip(FORMATS, rows)]
    shown += [(f, r.quantities[f"{f.name.replace('fp8 ', '')}_binades"].value) for f in FORMATS if f.dtype is not None]
    r.claim(
        "range (binades): in (n - 1, n], n = binades the codes fill",
        sum(not _binades_filled(f) - 1 < binades <= _binades_filled(f) for f, binades in shown),
        0,
        formula="n = normal exponent codes (2^e - 2; e4m3: 2^e - 1) + m",
    )
    tf = fmt("tf32").layout()
    r.add("tf32_eps", tf["eps"], "", "tf32 epsilon (derived)")
    r.add("tf32_max", tf["max"], "", "tf32 max (derived)")
    # tf32 has no torch dtype to read back: the page's statement about it, checked against fp16's and fp32's
    # torch.finfo (fp16's precision: 10 mantissa bits; fp32's range: 8 exponent bits, to one part in 2^10).
    r.claim("tf32 epsilon = fp16's (torch.finfo)", tf["eps"], torch.finfo(torch.float16).eps)
    r.claim(
        "tf32 max = fp32's range (torch.finfo), to its 10-bit mantissa",
        tf["max"],
        torch.finfo(torch.float32).max,
        rel_tol=2.0**-10,
    )
    # Casting past the largest value: saturation (to max) or overflow (to inf/NaN), as this build does it.
    for f in (fmt("fp8 e4m3"), fmt("fp8 e5m2"), fmt("fp16")):
        slug = f.name.replace("fp8 ", "")
        r.add(
            f"{slug}_cast_of_2max",
            torch.tensor([2 * f.layout()["max"]]).to(f.dtype).float().item(),
            "",
            f"{f.name}: a plain cast of twice its max",
        )
    # What the page says this build does: e4m3fn has no inf, so a cast past its max saturates (or is NaN on
    # builds that do not saturate); e5m2 and fp16 have inf and overflow to it.
    sat = r.quantities["e4m3_cast_of_2max"].value
    r.claim(
        "e4m3 fn: a plain cast of twice its max saturates to its max (it has no inf)",
        sat,
        fmt("fp8 e4m3").layout()["max"],
    )
    for slug in ("e5m2", "fp16"):
        value = r.quantities[f"{slug}_cast_of_2max"].value
        r.claim(f"{slug}: a plain cast of twice its max overflows to inf (1 = inf)", int(math.isinf(value)), 1)
    if device == "cuda":
        r.add("tf32_eps_measured", _tf32_eps(), "", "smallest 2^-k that a tf32 matmul keeps in 1 + 2^-k (GPU)")
        r.claim("tf32 matmul keeps 10 mantissa bits (GPU)", r.quantities["tf32_eps_measured"].value, tf["eps"])
    return r


def _binades_filled(f: Format) -> int:
    """Binades holding a format's positive numbers, counted on its codes: one per exponent code of the normals (all
    but 0 and, in IEEE, the all-ones code of inf/NaN) and one per mantissa bit for the subnormals."""
    return 2**f.exponent_bits - (2 if f.ieee else 1) + f.mantissa_bits


def _tf32_eps() -> float:
    """CUDA: multiply rows of 1 + 2^-k by the identity with tf32 allowed; the finest k that survives."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        ks = torch.arange(1, 257, device="cuda", dtype=torch.float32)  # 2^-k is 0 in 1 + 2^-k beyond k = 23
        a = (1 + 2.0**-ks)[:, None].expand(-1, 256).contiguous()  # (256, 256): sizes tensor cores take
        out = a @ torch.eye(256, device="cuda")
        kept = (out[:, 0] != 1).cpu()
        return 2.0 ** -int(ks.cpu()[kept].max())
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


@experiment(
    "bf16-vs-fp16",
    "where fp16 fails (range: underflow, overflow) and bf16 fails (precision: rounding, "
    "accumulation), on a real model's tensors",
)
@single_threaded
def bf16_vs_fp16(device: str) -> Result:
    r = Result("bf16-vs-fp16")
    divisor = 16  # the loss of one of 16 accumulated micro-batches
    x, y = counting_batch(8, device=device)
    r.claim(
        "targets = inputs + 1 (mod vocab) at all batch × sequence positions",
        ((y - x) % CFG.vocab == 1).sum().item(),
        x.shape[0] * GPTConfig().seq,
    )
    model = small_model(device=device)
    t = capture(model, x, y, loss_divisor=divisor)
    r.claim(
        f"gradients (returned, in .grad) = torch.autograd.grad of loss / {divisor} and of the full loss",
        _gradients_off_autograd(model, x, y, t, divisor)
        + _gradients_off_autograd(model, x, y, capture(model, x, y), 1),
        0,
        unit="tensors",
        formula="F.cross_entropy (mean) / divisor, no hooks; bit-identical",
    )
    acts, grads, params = (
        concat_flat(t["activations"]),
        concat_flat(t["activation_grads"]),
        concat_flat(t["param_grads"]),
    )
    v = params**2  # Adam's second moment after one step (1 - beta2 times this; the factor only shifts it down)
    scale = 2.0**28  # a loss scale too large for fp16
    cases = []
    for what, tensor in (("activation gradients", grads), ("Adam v = g² of the parameter gradients", v)):
        cases.append((f"{what}: flushed to zero", *(flushed(tensor, cast(tensor, d)) for d in DTYPES)))
    over = [(~torch.isfinite(cast(params * scale, d))).float().mean().item() for d in DTYPES]
    cases.append((f"parameter gradients × 2^{int(math.log2(scale))} (a loss scale): overflowed", *over))
    err = [relative_error(acts, cast(acts, d)) for d in DTYPES]
    cases.append(("activations: relative rounding error", *err))
    sums = [_running_sum(t["token_losses"], d) for d in DTYPES]
    exact = t["token_losses"].double().sum().item()
    sum_err = [abs(s - exact) / exact for s in sums]
    cases.append(
        (f"sum of {t['token_losses'].numel()} token losses, accumulated in the format: relative error", *sum_err)
    )
    r.table(
        "failures",
        ["real tensor (small GPT, one step)", "fp16", "bf16"],
        [list(c) for c in cases],
        caption=f"Activations and gradients of chapter 1's model, loss divided by {divisor} (gradient "
        "accumulation); fp32 values cast to each format",
    )
    names = ["grad_flushed", "v_flushed", "overflow", "act_error", "sum_error"]
    for name, c in zip(names, cases):
        for d, val in zip(("fp16", "bf16"), c[1:]):
            r.add(f"{d}_{name}", val, "fraction" if name != "act_error" else "", f"{d}: {c[0]}")
    r.claim(
        "table = numpy re-derivation (finfo thresholds, float16 and bf16 rounding): max rel. diff",
        _max_relative_difference(
            cases, _failures_without_torch_casts(grads, v, params * scale, acts, t["token_losses"])
        ),
        0,
        abs_tol=1e-6,
        formula="±1e-6: the overflow share is a float32 mean",
    )
    r.add("batch", x.shape[0], "", "sequences in the batch")
    r.add("loss_divisor", divisor, "", "loss divided by (gradient accumulation steps)")
    r.add("scale_log2", int(math.log2(scale)), "", "log2 of the loss scale")
    r.add("tokens", t["token_losses"].numel(), "", "tokens in the batch")
    r.add("exact_sum", exact, "", "sum of the token losses (float64)")
    r.add("fp16_sum", sums[0], "", "accumulated in fp16")
    r.add("bf16_sum", sums[1], "", "accumulated in bf16")
    r.add("act_error_ratio", err[1] / err[0], "", "bf16 rounding error / fp16 rounding error on activations")
    r.claim(
        "fp16 fails on range: it flushes activation gradients that bf16 keeps",
        cases[0][1],
        0.01,
        relation=">=",
        unit="fraction",
        formula="at least 1 % flushed in fp16",
    )
    r.claim("bf16 keeps every nonzero activation gradient", cases[0][2], 0, unit="fraction")
    r.claim("bf16 keeps every nonzero Adam v", cases[1][2], 0, unit="fraction")
    r.claim("fp16 overflows the largest scaled gradients (values)", over[0] * params.numel(), 1, relation=">=")
    r.claim("bf16 does not overflow them", over[1], 0, unit="fraction")
    r.claim(
        "bf16 rounding error / fp16 = 2^3 (3 fewer mantissa bits)",
        r.quantities["act_error_ratio"].value,
        8,
        rel_tol=0.25,
        formula="RMS error scales with 2^-m; ±25 % for the shape of the distribution within a binade",
    )
    r.claim("bf16 accumulation error ≥ 10 × fp16's on the loss sum", sum_err[1] / sum_err[0], 10, relation=">=")
    return r


DTYPES = (torch.float16, torch.bfloat16)


def _running_sum(values: torch.Tensor, dtype: torch.dtype) -> float:
    """Add the values one by one into an accumulator of `dtype` (each partial sum rounded)."""
    acc = torch.zeros((), dtype=dtype)
    for v in values.to(dtype).cpu():
        acc = acc + v
    return acc.item()


def _gradients_off_autograd(model: GPT, x: torch.Tensor, y: torch.Tensor, captured: dict, divisor: float) -> int:
    """How many of capture's parameter gradients, returned or left in .grad for an optimizer step, differ from
    torch.autograd.grad of F.cross_entropy's own mean / divisor (another route: no hooks, no per-token losses)."""
    params = list(model.parameters())
    reference = torch.autograd.grad(F.cross_entropy(model(x).flatten(0, 1), y.flatten()) / divisor, params)
    left = [p.grad for p in params]
    return sum(not torch.equal(a, b) for got in (captured["param_grads"], left) for a, b in zip(got, reference))


def _bf16_round(x: np.ndarray) -> np.ndarray:
    """fp32 values rounded to bf16 on their bits: keep the top 16, round to nearest, ties to even."""
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)


def _failures_without_torch_casts(grads, v, scaled, acts, losses) -> list[list[float]]:
    """bf16-vs-fp16's table (fp16, bf16 per row) by another route than torch's casts: a flush or an overflow from
    each format's torch.finfo thresholds in float64, rounding with numpy's float16 and bf16's bit rounding above,
    sums accumulated one value at a time in those roundings against math.fsum."""
    rounders = (lambda a: a.astype(np.float16).astype(np.float32), _bf16_round)
    finfos = [torch.finfo(d) for d in DTYPES]
    rows = []
    for tensor in (grads, v):
        mags = np.abs(tensor.double().cpu().numpy())
        nonzero = max(1, int((mags > 0).sum()))
        rows.append([int(((mags > 0) & (mags <= fi.smallest_normal * fi.eps / 2)).sum()) / nonzero for fi in finfos])
    mags = np.abs(scaled.double().cpu().numpy())
    tops = [fi.max + fi.eps * 2.0 ** math.floor(math.log2(fi.max)) / 2 for fi in finfos]
    rows.append([float((mags >= top).mean()) for top in tops])
    a = acts.cpu().numpy()
    rows.append(
        [
            float(np.linalg.norm(rnd(a).astype(np.float64) - a) / np.linalg.norm(a.astype(np.float64)))
            for rnd in rounders
        ]
    )
    values = losses.cpu().numpy()
    exact = math.fsum(values.astype(np.float64).tolist())
    sums = []
    for rnd in rounders:
        acc = np.zeros(1, dtype=np.float32)
        for value in rnd(values):
            acc = rnd(acc + value)
        sums.append(abs(float(acc[0]) - exact) / exact)
    rows.append(sums)
    return rows


def _max_relative_difference(cases: list[tuple], reference: list[list[float]]) -> float:
    """The largest |table - reference| / |reference| over the number cells (|table| where the reference is 0)."""
    pairs = [(a, b) for row, ref in zip(cases, reference) for a, b in zip(row[1:], ref)]
    return max(abs(a - b) / abs(b) if b else abs(a) for a, b in pairs)
