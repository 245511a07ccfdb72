"""Scaling laws: how much compute a run costs, and how to split it between parameters and tokens.

Training compute (Kaplan et al. 2020, Section 2.1): every parameter does a multiply-add per token in the
forward pass and two in the backward, so a run of N parameters over D tokens costs

    C ≈ 6 N D FLOPs                                   (attention's 12 L h s per token left out, as the papers do)

Chinchilla's fitted loss (Hoffmann et al. 2022, Section 3.3, Approach 3), in nats per token:

    L(N, D) = E + A / N^α + B / D^β

Minimising it on the iso-FLOP curve D = C / (6N) gives a closed form (the paper's Equation 4):

    N_opt(C) = G (C/6)^a,  D_opt(C) = G⁻¹ (C/6)^b,  G = (αA / (βB))^(1/(α+β)),  a = β/(α+β),  b = α/(α+β)

The paper's three approaches disagree in the constant: Approach 1 (Table 3, the "about 20 tokens per
parameter" rule) and Approach 2 put N_opt ∝ C^0.5, while the printed Approach 3 constants put the optimum
at a smaller model trained on more tokens. Besiroglu et al. 2024 refit Approach 3 and recover Approach 1.
`compute_optimal` therefore follows Table 3 (a power law fitted to its rows) and reports the others beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from distlab.core.cli import command, emit, parser, positive
from distlab.core.experiments import experiment
from distlab.core.facts import entries, value
from distlab.core.results import Result
from distlab.throughput.gpu_cost import add_usd, dollars, price, usd

FLOPS_PER_PARAM_TOKEN = 6  # forward 2 + backward 4 (input and weight gradients)
HOUR = 3600.0
SCALES = ((1e12, "trillion"), (1e9, "billion"), (1e6, "million"))


def in_words(count: float) -> tuple[float, str]:
    """A large count as (value, scale word): 6.74e9 -> (6.74, "billion"), for readable pages."""
    for factor, word in SCALES:
        if abs(count) >= factor:
            return count / factor, word
    return count, ""


def words(count: float, noun: str = "") -> str:
    """ "6.74 billion parameters" (three significant figures)."""
    v, word = in_words(count)
    return " ".join(x for x in (f"{float(f'{v:.3g}'):g}", word, noun) if x)


def add_count(r: Result, name: str, count: float, noun: str, description: str) -> None:
    """r.add for a parameter or token count, in a scale a reader can say: 89.3 billion parameters."""
    v, word = in_words(count)
    r.add(name, v, f"{word} {noun}".strip(), description)


def training_flops(params: float, tokens: float) -> float:
    """C = 6 N D."""
    if not (params > 0 and tokens > 0):
        raise ValueError(f"params and tokens must be positive, got {params} and {tokens}")
    return FLOPS_PER_PARAM_TOKEN * params * tokens


# ---------------------------------------------------------------- the fitted loss
@dataclass(frozen=True, kw_only=True)
class Law:
    """L(N, D) = E + A / N^alpha + B / D^beta."""

    name: str
    E: float
    """Irreducible loss (nats per token): the entropy of text that no model removes."""
    A: float
    B: float
    alpha: float
    """How fast the loss falls with parameters."""
    beta: float
    """How fast the loss falls with tokens."""

    def __post_init__(self) -> None:
        for k in ("A", "B", "alpha", "beta"):
            if not getattr(self, k) > 0:
                raise ValueError(f"law {self.name}: {k} must be positive, got {getattr(self, k)}")

    def loss(self, params: float, tokens: float) -> float:
        return self.E + self.A / params**self.alpha + self.B / tokens**self.beta

    @property
    def a(self) -> float:
        """Exponent of N_opt ∝ C^a."""
        return self.beta / (self.alpha + self.beta)

    @property
    def G(self) -> float:  # the paper's symbol
        return (self.alpha * self.A / (self.beta * self.B)) ** (1 / (self.alpha + self.beta))


def law(name: str = "chinchilla") -> Law:
    """The paper's constants ("chinchilla"), the same as Besiroglu et al. quote them ("chinchilla-as-quoted"), or
    their refit ("epoch-refit")."""
    known = ("chinchilla", "chinchilla-as-quoted", "epoch-refit")
    if name not in known:
        raise ValueError(f"unknown law {name!r}; known: {', '.join(known)}")
    return Law(name=name, **{k: value(f"scaling_laws.{name}.{k}") for k in ("E", "A", "B", "alpha", "beta")})


def optimal_by_search(lw: Law, flops: float, points: int = 4001) -> tuple[float, float]:
    """Naive: evaluate L on the iso-FLOP curve over N from 1e3 to 1e16 and refine around the smallest."""
    lo, hi = 3.0, 16.0
    for _ in range(4):  # a grid, then three finer grids around its minimum
        n = np.logspace(lo, hi, points)
        i = int(np.argmin(lw.loss(n, flops / (FLOPS_PER_PARAM_TOKEN * n))))
        step = (hi - lo) / (points - 1)
        lo, hi = math.log10(n[i]) - 2 * step, math.log10(n[i]) + 2 * step
    params = float(n[i])
    return params, flops / (FLOPS_PER_PARAM_TOKEN * params)


def optimal(lw: Law, flops: float) -> tuple[float, float]:
    """Closed form: N_opt = G (C/6)^a, D_opt = (C/6) / N_opt."""
    if not flops > 0:
        raise ValueError(f"flops must be positive, got {flops}")
    params = lw.G * (flops / FLOPS_PER_PARAM_TOKEN) ** lw.a
    return params, flops / (FLOPS_PER_PARAM_TOKEN * params)


# ---------------------------------------------------------------- Table 3: the "20 tokens per parameter" rule
def table3() -> list[dict]:
    """The paper's compute-optimal rows (Approach 1): params, flops, tokens."""
    return [
        dict(name=k, **{f: v[f] for f in ("params", "flops", "tokens")})
        for k, v in entries("scaling_laws").items()
        if k.startswith("optimal-")
    ]


def table3_fit() -> tuple[float, float]:
    """(k, a) of N_opt = k C^a, least squares in log-log through Table 3's rows."""
    rows = table3()
    x = np.log10([r["flops"] for r in rows])
    y = np.log10([r["params"] for r in rows])
    a, log_k = np.polyfit(x, y, 1)
    return float(10**log_k), float(a)


def compute_optimal(flops: float) -> tuple[float, float]:
    """(params, tokens) for a budget of `flops`: Table 3's power law, tokens = C / (6 N)."""
    if not (flops > 0 and math.isfinite(flops)):
        raise ValueError(f"flops must be a positive finite number, got {flops}")
    k, a = table3_fit()
    params = k * flops**a
    return params, flops / (FLOPS_PER_PARAM_TOKEN * params)


# ---------------------------------------------------------------- budgets in GPU-hours
def gpu_hours(flops: float, peak_flops_per_gpu: float, mfu: float) -> float:
    """GPU-hours a run of `flops` model FLOPs takes at `mfu` of the dense peak."""
    if not (0 < mfu <= 1):
        raise ValueError(f"mfu must be in (0, 1], got {mfu}")
    return flops / (peak_flops_per_gpu * mfu) / HOUR


def implied_mfu(name: str = "Llama2-7B") -> float:
    """The MFU a published run's GPU-hours imply: 6 N D / (hours x 3600 x peak)."""
    from distlab.hardware.gpus import gpu
    from distlab.models.shapes import preset

    row = entries("scaling_laws")[name]
    params = preset(name.split("-")[1]).params()
    flops = training_flops(params, row["tokens_trillion"] * 1e12)
    return flops / (row["gpu_hours"] * HOUR * gpu(row["gpu"]).peak_flops("bf16"))


# What one SFT example is long, in tokens: the paper prints no statistics for its SFT annotations, so each basis is a
# stated proxy (sft_data.toml). Packing concatenates examples into 4096-token windows, so the window is an upper bound.
SFT_BASES = {
    "llama2-meta-dialogue": "Llama 2 Table 6, Meta (Safety & Helpfulness) preference data: tokens per example "
    "(the whole dialogue, 3.9 turns)",
    "lima": "LIMA Table 1: its 1,000 examples' input + output lengths, averaged",
    "llama2-meta-turn": "Llama 2 Table 6, Meta: one prompt + one response",
    "packed-window": "every example fills a 4096-token window (the upper bound)",
}
SFT_DEFAULT_BASIS = "llama2-meta-dialogue"


def sft_mean_example_tokens(basis: str = SFT_DEFAULT_BASIS) -> float:
    """Mean tokens per SFT example under `basis` (SFT_BASES), from sft_data.toml."""
    data = entries("sft_data")
    if basis == "llama2-meta-dialogue":
        return data["llama2-pref-meta"]["tokens_per_example"]
    if basis == "llama2-meta-turn":
        return data["llama2-pref-meta"]["tokens_per_prompt"] + data["llama2-pref-meta"]["tokens_per_response"]
    if basis == "lima":
        rows = [v for k, v in data.items() if k.startswith("lima-") and "input_len_mean" in v]
        return sum(r["examples"] * (r["input_len_mean"] + r["output_len_mean"]) for r in rows) / sum(
            r["examples"] for r in rows
        )
    if basis == "packed-window":
        return data["llama2-sft-packing"]["seq"]
    raise ValueError(f"unknown SFT length basis {basis!r}; known: {', '.join(SFT_BASES)}")


def sft_tokens(mean_example_tokens: float | None = None) -> float:
    """Tokens of Llama 2-Chat's supervised fine-tune: annotations x mean tokens per example x epochs.

    With no argument it is the old upper bound, every example filling a 4096-token window (kept so existing callers
    do not change underneath; pages should pass `sft_mean_example_tokens()`)."""
    row = entries("scaling_laws")["Llama2-SFT"]
    length = row["seq"] if mean_example_tokens is None else mean_example_tokens
    if not length > 0:
        raise ValueError(f"mean_example_tokens must be positive, got {length}")
    return row["annotations"] * length * row["epochs"]


def sft_budget(
    params: float,
    *,
    basis: str = SFT_DEFAULT_BASIS,
    gpu_name: str = "A100-SXM-80GB",
    mfu: float | None = None,
    usd_per_gpu_hour: float | None = None,
) -> dict:
    """Llama 2-Chat's fine-tune for a model of `params`: tokens, packed sequences, optimizer steps (batch 64 packed
    windows), FLOPs (6ND), GPU-hours at `mfu` (default: Llama 2 7B's implied MFU) and dollars. The function chapter 14
    (and any plan of a fine-tune) should call instead of multiplying examples by the window."""
    from distlab.hardware.gpus import gpu

    row = entries("scaling_laws")["Llama2-SFT"]
    mean = sft_mean_example_tokens(basis)
    tokens = sft_tokens(mean)
    flops = training_flops(params, tokens)
    mfu = implied_mfu() if mfu is None else mfu
    hours = gpu_hours(flops, gpu(gpu_name).peak_flops("bf16"), mfu)
    p = price(gpu_name, usd_per_gpu_hour)
    return {
        "basis": basis,
        "mean_example_tokens": mean,
        "tokens": tokens,
        "packed_sequences": tokens / row["seq"],
        "steps": tokens / (row["seq"] * row["batch_sequences"]),
        "flops": flops,
        "gpu": gpu_name,
        "mfu": mfu,
        "gpu_hours": hours,
        "usd": dollars(hours, p),
        "price": p.as_dict(),
    }


# ---------------------------------------------------------------- the `scaling` calculator
def report(
    flops: float, gpu_name: str = "A100-SXM-80GB", mfu: float | None = None, usd_per_gpu_hour: float | None = None
) -> dict:
    """Everything `distlab scaling --flops C` prints (its --json). Cost = GPU-hours x a price per GPU-hour: the one
    given, else the median of the dated on-demand list (distlab.throughput.gpu_cost); no sourced price: usd None."""
    from distlab.hardware.gpus import gpu

    gpu_name = gpu(gpu_name).name  # canonical spelling, and a clear error for an unknown GPU
    params, tokens = compute_optimal(flops)
    chin, refit = law("chinchilla"), law("epoch-refit")
    mfu = implied_mfu() if mfu is None else mfu
    peak = gpu(gpu_name).peak_flops("bf16")
    out = {
        "flops": flops,
        "params": params,
        "tokens": tokens,
        "tokens_per_param": tokens / params,
        "rule": "Chinchilla Table 3 (Approach 1), fitted as N = k C^a",
        "loss": chin.loss(params, tokens),
        "gpu": gpu_name,
        "mfu": mfu,
        "gpu_hours": gpu_hours(flops, peak, mfu),
    }
    for key, lw in (("approach3", chin), ("epoch_refit", refit)):
        n, d = optimal(lw, flops)
        out[key] = {"params": n, "tokens": d, "tokens_per_param": d / n, "loss": lw.loss(n, d)}
    rows = [row["flops"] for row in table3()]
    out["extrapolated"] = not (min(rows) <= flops <= max(rows))
    out["warnings"] = []
    try:
        p = price(gpu_name, usd_per_gpu_hour)
    except ValueError as exc:  # no list price for this GPU and none given
        out.update(usd=None, price_per_gpu_hour=None, price={"basis": str(exc)})
        return out
    out.update(usd=dollars(out["gpu_hours"], p), price_per_gpu_hour=p.usd_per_gpu_hour, price=p.as_dict())
    if p.basis == "given" and not (p.low / 3 <= p.usd_per_gpu_hour <= 3 * p.high):
        out["warnings"].append(
            f"${p.usd_per_gpu_hour:g} per GPU-hour is far outside the sourced ${p.low:g}-${p.high:g} for {gpu_name}: "
            "is it per instance rather than per GPU?"
        )
    return out


@command("scaling", "compute-optimal parameters and tokens for a FLOP budget (Chinchilla), and its GPU-hours")
def scaling_command(argv: list[str]) -> int:
    p = parser(
        "scaling",
        "Split a training budget of C FLOPs (C = 6 N D) between parameters N and tokens D.\n"
        "params/tokens follow Chinchilla's Table 3 (about 20 tokens per parameter); the fitted loss\n"
        "L = E + A/N^alpha + B/D^beta gives the loss and, with the paper's and a refit's constants, the\n"
        "Approach 3 optimum beside it. GPU-hours at --mfu of --gpu's dense bf16 peak (default: the MFU\n"
        "Llama 2 7B's published A100 GPU-hours imply).",
    )
    p.add_argument("--flops", type=positive(float, 1e35), required=True, help="training budget C in FLOPs (1e23 works)")
    p.add_argument("--gpu", default="A100-SXM-80GB", help="accelerator for GPU-hours (see `distlab gpus`)")
    p.add_argument("--mfu", type=positive(float, 1.0), default=None, help="model FLOPs utilisation, 0-1")
    p.add_argument(
        "--price-per-gpu-hour",
        type=positive(float, 1e4),
        default=None,
        help="USD per GPU-hour (default: the median of the dated on-demand list prices for --gpu)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    args = p.parse_args(argv)
    out = report(args.flops, args.gpu, args.mfu, args.price_per_gpu_hour)
    a3, ep = out["approach3"], out["epoch_refit"]
    hours_format = ",.0f" if out["gpu_hours"] >= 10 else ".3g"
    text = (
        f"C = {args.flops:.3g} FLOPs\n"
        f"compute-optimal (Table 3): {out['params']:.3g} parameters x {out['tokens']:.3g} tokens "
        f"({out['tokens_per_param']:.1f} tokens/parameter), loss {out['loss']:.3f}\n"
        f"Approach 3, paper's constants: {a3['params']:.3g} x {a3['tokens']:.3g} "
        f"({a3['tokens_per_param']:.0f} tokens/parameter)\n"
        f"Approach 3, Besiroglu et al. refit: {ep['params']:.3g} x {ep['tokens']:.3g} "
        f"({ep['tokens_per_param']:.0f} tokens/parameter)\n"
        f"{out['gpu_hours']:{hours_format}} {out['gpu']} GPU-hours at {100 * out['mfu']:.0f} % MFU"
    )
    pr = out["price"]
    if out["usd"] is None:
        text += f"\ncost: {pr['basis']}"
    else:
        text += (
            f"\ncost: {usd(out['usd'])} at ${out['price_per_gpu_hour']:.2f} per GPU-hour ({pr['basis']}"
            + (f", dated {pr['dates']}" if pr["basis"] != "given" else "")
            + f"; the list runs ${pr['low']:.2f}-${pr['high']:.2f})"
        )
    if out["extrapolated"]:
        rows = [row["flops"] for row in table3()]
        text += (
            f"\nwarning: C lies outside Table 3's {min(rows):.3g}-{max(rows):.3g} FLOPs; every number above is "
            "a power law extrapolated past the paper's data"
        )
    text += "".join(f"\nwarning: {w}" for w in out["warnings"])
    emit(out, args.json, text)
    return 0


def optimal_tokens_for(params: float) -> float:
    """Tokens that make `params` compute-optimal by Table 3's power law: C = (N/k)^(1/a), D = C / (6N)."""
    if not params > 0:
        raise ValueError(f"params must be positive, got {params}")
    k, a = table3_fit()
    return (params / k) ** (1 / a) / (FLOPS_PER_PARAM_TOKEN * params)


# ---------------------------------------------------------------- the chapter's experiment
BUDGETS = (1e20, 1e21, 1e22, 1e23, 1e24, 1e25)  # FLOPs, for the iso-FLOP figure and the table of optima


@experiment(
    "scaling-laws",
    "C = 6ND, Chinchilla's fitted loss and compute-optimal N and D, iso-FLOP curves, "
    "and fine-tune vs pretraining budgets",
    kind="computed",
)
def scaling_laws(device: str) -> Result:
    from distlab.memory.model_states import add_state_bytes
    from distlab.models.shapes import preset

    r = Result("scaling-laws", kind="computed")
    chin, refit = law("chinchilla"), law("epoch-refit")
    k, a_fit = table3_fit()
    r.add("table3_a", a_fit, "", "exponent of N_opt ∝ C^a fitted to Table 3")
    r.add("table3_k", k, "", "prefactor k of N_opt = k C^a")
    r.add("a3_exponent", chin.a, "", "β/(α+β) with the paper's constants")
    r.add("refit_exponent", refit.a, "", "β/(α+β) with the refit's constants")
    r.add("a3_G", chin.G, "", "G with the paper's constants")
    for lw, key in ((chin, "chin"), (refit, "refit")):  # printed as quantities: a footnote may not follow a digit
        for k in ("A", "B", "alpha", "beta"):
            r.add(f"{key}_{k}", getattr(lw, k), "", f"{lw.name}: {k}")
    quoted = law("chinchilla-as-quoted")
    for k in ("E", "A", "B", "alpha", "beta"):
        r.claim(
            f"Chinchilla's {k} as the paper prints it = as Besiroglu et al. quote it",
            getattr(chin, k),
            getattr(quoted, k),
        )
    rows = []
    for row in table3():
        ratio = training_flops(row["params"], row["tokens"]) / row["flops"]
        rows.append(
            [
                words(row["params"]),
                f"{row['flops']:.3g}",
                words(row["tokens"]),
                f"{row['tokens'] / row['params']:.1f}",
                f"{ratio:.3f}",
                words(compute_optimal(row["flops"])[0]),
            ]
        )
        r.claim(
            f"Table 3, {row['name'][8:]}: 6ND = the FLOPs column",
            training_flops(row["params"], row["tokens"]),
            row["flops"],
            rel_tol=0.05,
            formula="C = 6ND (tokens printed rounded)",
        )
    from distlab.scaling_laws_checks import claim_transcriptions

    claim_transcriptions(r)
    r.table(
        "table3",
        ["parameters", "FLOPs", "tokens", "tokens / parameter", "6ND / FLOPs", "our fit's N at C"],
        rows,
        caption="Hoffmann et al. 2022, Table 3 (Approach 1), and the power law N = k C^a fitted to it",
    )
    r.claim(
        "Table 3's power law: exponent a = Approach 1's (Table 2)",
        a_fit,
        value("scaling_laws.approach1.a"),
        abs_tol=0.02,
        formula="least squares of log N on log C",
    )
    r.claim(
        "paper's Approach 3 constants: β/(α+β) = Table 2's a",
        chin.a,
        value("scaling_laws.approach3.a"),
        abs_tol=0.01,
        formula="a = β/(α+β)",
    )
    r.claim(
        "Besiroglu et al.'s refit: β/(α+β) = Approach 1's a",
        refit.a,
        value("scaling_laws.approach1.a"),
        abs_tol=0.02,
        formula="a = β/(α+β)",
    )

    # Chinchilla against Gopher: the same compute, four times fewer parameters.
    c_chin = training_flops(value("scaling_laws.Chinchilla-70B.params"), value("scaling_laws.Chinchilla-70B.tokens"))
    c_goph = training_flops(value("scaling_laws.Gopher-280B.params"), value("scaling_laws.Gopher-280B.tokens"))
    loss_chin = chin.loss(value("scaling_laws.Chinchilla-70B.params"), value("scaling_laws.Chinchilla-70B.tokens"))
    loss_goph = chin.loss(value("scaling_laws.Gopher-280B.params"), value("scaling_laws.Gopher-280B.tokens"))
    r.add("chinchilla_flops", c_chin, "FLOP", "Chinchilla: 6 x 70B x 1.4T")
    r.add("gopher_flops", c_goph, "FLOP", "Gopher: 6 x 280B x 300B")
    r.add("chinchilla_loss", loss_chin, "nats", "the law's loss for Chinchilla")
    r.add("gopher_loss", loss_goph, "nats", "the law's loss for Gopher")
    r.claim(
        "the law ranks Chinchilla (70B, 1.4T tokens) below Gopher (280B, 300B tokens)",
        loss_chin,
        loss_goph,
        relation="<=",
        formula="L = E + A/N^α + B/D^β",
    )
    n_search, _ = optimal_by_search(chin, c_chin)
    n_closed, d_closed = optimal(chin, c_chin)
    r.claim(
        "Approach 3 optimum: closed form = grid search on the iso-FLOP curve",
        n_closed,
        n_search,
        rel_tol=1e-3,
        formula="N_opt = G (C/6)^(β/(α+β))",
    )
    n_t3, d_t3 = compute_optimal(c_chin)
    r.claim(
        "Table 3's law at Chinchilla's compute: tokens per parameter = Chinchilla's own",
        d_t3 / n_t3,
        value("scaling_laws.Chinchilla-70B.tokens") / value("scaling_laws.Chinchilla-70B.params"),
        rel_tol=0.1,
        formula="D/N",
    )
    for key, (n, d) in (("t3", (n_t3, d_t3)), ("a3", (n_closed, d_closed)), ("refit", optimal(refit, c_chin))):
        add_count(r, f"chin_{key}_params", n, "parameters", f"{key}: N_opt at Chinchilla's compute")
        add_count(r, f"chin_{key}_tokens", d, "tokens", f"{key}: D_opt at Chinchilla's compute")
        r.add(f"chin_{key}_ratio", d / n, "", f"{key}: tokens per parameter at Chinchilla's compute")
    r.claim(
        "the page's 'back in line with Approach 1': the refit's tokens per parameter at Chinchilla's compute within "
        "20 % of Chinchilla's own (1.4T / 70B)",
        r.quantities["chin_refit_ratio"].value,
        value("scaling_laws.Chinchilla-70B.tokens") / value("scaling_laws.Chinchilla-70B.params"),
        rel_tol=0.2,
        formula="D_opt / N_opt = (C/6) / G^2 (C/6)^(2a) with the refit's E, A, B, alpha, beta",
    )
    _optima_table(r, chin, refit)
    _approach3_printed(r, chin)
    _budgets(r, preset("7B").params())
    _sft_lengths(r, preset("7B").params())
    _dollars(r, preset("7B").params())
    _figure(r, chin, refit)
    add_state_bytes(r)  # the 16 bytes per parameter the page quotes, claimed
    return r


# Printed to two decimals (α, β) and one (A, B): the paper's unrounded constants lie within half a unit of the last
# digit. Whatever the paper derived from them must be reachable from some constants in that box.
ROUNDING = {"alpha": 0.005, "beta": 0.005, "A": 0.05, "B": 0.05}


def rounding_box_range(lw: Law, flops: float) -> tuple[float, float]:
    """(smallest, largest) Approach 3 optimum N at `flops` over every constant set that rounds to `lw`'s: the
    corners of the box (N_opt is monotone in each constant)."""
    import itertools

    values = []
    for signs in itertools.product((-1, 1), repeat=len(ROUNDING)):
        kw = {k: getattr(lw, k) + s * d for (k, d), s in zip(ROUNDING.items(), signs)}
        corner = Law(name="corner", E=lw.E, **kw)
        values.append(optimal(corner, flops)[0])
    return min(values), max(values)


def _approach3_printed(r: Result, chin: Law) -> None:
    """What the paper derived from its (unrounded) Approach 3 fit, against the printed (rounded) constants: the
    exponents of Table 2, the 40B at Gopher's budget (Figure 4), and Table A3's Approach 3 rows."""
    r.claim(
        "paper's Approach 3 constants: α/(α+β) = Table 2's b",
        chin.alpha / (chin.alpha + chin.beta),
        value("scaling_laws.approach3.b"),
        abs_tol=0.01,
        formula="b = α/(α+β)",
    )
    c_gopher = value("scaling_laws.gopher-budget-approach3.flops")
    paper = value("scaling_laws.gopher-budget-approach3.params")
    n_rounded, _ = optimal(chin, c_gopher)
    lo, hi = rounding_box_range(chin, c_gopher)
    add_count(
        r, "gopher_a3_rounded_params", n_rounded, "parameters", "Approach 3 at Gopher's budget, printed constants"
    )
    add_count(r, "gopher_a3_paper_params", paper, "parameters", "the paper's own projection at Gopher's budget")
    add_count(r, "gopher_a1_params", value("scaling_laws.gopher-budget-approach1.params"), "parameters", "Approach 1")
    r.add("gopher_budget_flops", c_gopher, "FLOP", "Gopher's compute budget")
    r.add("gopher_a3_rounded_over_paper", n_rounded / paper, "", "printed constants' optimum / the paper's 40B")
    add_count(r, "gopher_box_low", lo, "parameters", "smallest optimum of constants that round to the printed ones")
    add_count(r, "gopher_box_high", hi, "parameters", "largest such optimum")
    r.claim(
        "the paper's 40B at Gopher's budget is reachable from constants that round to the printed ones",
        paper,
        lo,
        relation=">=",
        unit="params",
        formula="α, β ± 0.005, A, B ± 0.05: the smallest corner",
    )
    r.claim("... and the largest corner", paper, hi, relation="<=", unit="params")
    from distlab.scaling_laws_checks import rounding_box_by_hand

    rounding_box_by_hand(r)
    r.claim(
        "the printed (rounded) constants put Gopher's optimum below the paper's 40B",
        n_rounded,
        paper,
        relation="<=",
        unit="params",
        formula="N_opt = G (C/6)^(β/(α+β))",
    )
    n_search, _ = optimal_by_search(chin, c_gopher)
    r.claim(
        "Approach 3 at Gopher's budget: closed form = grid search",
        n_rounded,
        n_search,
        rel_tol=1e-3,
        unit="params",
    )
    rows = [v for k, v in entries("scaling_laws").items() if k.startswith("approach3-")]
    flagged = [v for v in rows if abs(training_flops(v["params"], v["tokens"]) / v["flops"] - 1) > 0.05]
    good = [v for v in rows if v not in flagged]
    r.add("a3_rows_checked", len(good), "", "Table A3 Approach 3 rows whose FLOPs column is 6ND")
    r.claim(
        "Table A3, Approach 3: 6ND = the FLOPs column, every row but the one the data file flags (175B)",
        len(flagged),
        1,
        formula="the 175B row prints 1.26e24 for 6ND = 1.26e25 (noted in scaling_laws.toml)",
    )
    for v in good:
        lo, hi = rounding_box_range(chin, v["flops"])
        r.claim(
            f"Table A3, Approach 3, {words(v['params'])}: the row's N is reachable from the rounding box",
            v["params"],
            lo,
            relation=">=",
            unit="params",
            rel_tol=0.02,
            formula="N printed to 2-3 digits",
        )
        r.claim(
            f"... {words(v['params'])}: and not above it", v["params"], hi, relation="<=", unit="params", rel_tol=0.02
        )
    x = np.log10([v["flops"] for v in good])
    y = np.log10([v["params"] for v in good])
    slope = float(np.polyfit(x, y, 1)[0])
    r.add("a3_table_slope", slope, "", "slope of log N on log C through Table A3's Approach 3 rows")
    r.claim(
        "Table A3's Approach 3 rows have Table 2's exponent a",
        slope,
        value("scaling_laws.approach3.a"),
        abs_tol=0.005,
        formula="least squares of log N on log C",
    )


def _optima_table(r: Result, chin: Law, refit: Law) -> None:
    rows = []
    for c in BUDGETS:
        cells = [f"{c:.0e}"]
        for n, d in (compute_optimal(c), optimal(chin, c), optimal(refit, c)):
            cells += [words(n), words(d), f"{d / n:.0f}"]
        rows.append(cells)
    r.table(
        "optima",
        [
            "C (FLOPs)",
            "N (Table 3)",
            "D (Table 3)",
            "D/N",
            "N (paper's Approach 3)",
            "D",
            "D/N",
            "N (refit)",
            "D",
            "D/N",
        ],
        rows,
        caption="Compute-optimal splits of a budget: Table 3's power law, the closed form with the paper's "
        "printed constants, and with Besiroglu et al.'s refit",
    )
    n, d = compute_optimal(1e24)
    add_count(r, "c24_params", n, "parameters", "Table 3 law: N_opt at 1e24 FLOPs")
    add_count(r, "c24_tokens", d, "tokens", "Table 3 law: D_opt at 1e24 FLOPs")


def _budgets(r: Result, n7: int) -> None:
    """A 7B model: Chinchilla-optimal pretraining, Llama 2's pretraining, and Llama 2-Chat's fine-tune."""
    from distlab.hardware.gpus import gpu
    from distlab.models.shapes import preset

    a100 = gpu("A100-SXM-80GB").peak_flops("bf16")
    mfu = implied_mfu("Llama2-7B")
    add_count(r, "n7", n7, "parameters", "Llama 2 7B parameters")
    for name in ("Llama2-7B", "Llama2-13B", "Llama2-70B"):
        r.add(f"mfu_{name[7:].lower()}", implied_mfu(name), "fraction", f"{name}: MFU its A100 GPU-hours imply")
        row = entries("scaling_laws")[name]
        r.claim(
            f"{name}: implied MFU = 6 N D / (GPU-hours x 60 x 60 s x the A100's dense bf16 peak), by hand",
            r.quantities[f"mfu_{name[7:].lower()}"].value,
            6
            * preset(name.split("-")[1]).params()
            * row["tokens_trillion"]
            * 1e12
            / (row["gpu_hours"] * 60 * 60 * value(f"gpus.{row['gpu']}.bf16_dense_tflops") * 1e12),
            rel_tol=1e-9,
        )
    hours = {m: value(f"scaling_laws.Llama2-{m}.gpu_hours") for m in ("7B", "13B", "70B")}
    for m in ("13B", "70B"):
        r.claim(
            f"Llama 2: GPU-hours {m} / 7B = parameters {m} / 7B (C = 6ND, same tokens)",
            hours[m] / hours["7B"],
            preset(m).params() / n7,
            rel_tol=0.1,
            formula="hours ∝ N at fixed D",
        )
    d_opt = optimal_tokens_for(n7)
    d_llama = value("scaling_laws.Llama2-7B.tokens_trillion") * 1e12
    d_sft = sft_tokens(sft_mean_example_tokens())
    rows = []
    for label, key, tokens in (
        ("Chinchilla-optimal pretraining", "opt", d_opt),
        ("Llama 2 pretraining", "llama", d_llama),
        ("Llama 2-Chat supervised fine-tune (mean example length)", "sft", d_sft),
    ):
        flops = training_flops(n7, tokens)
        hrs = gpu_hours(flops, a100, mfu)
        rows.append([label, words(tokens), f"{flops:.3g}", f"{hrs:,.0f}", f"{hrs / 8 / 24:,.3g}"])
        add_count(r, f"{key}_tokens", tokens, "tokens", f"7B, {label}: tokens")
        r.add(f"{key}_flops", flops, "FLOP", f"7B, {label}: 6ND")
        r.add(f"{key}_gpu_hours", hrs, "GPU-hours", f"7B, {label}: A100 GPU-hours")
        r.add(f"{key}_days_8gpu", hrs / 8 / 24, "days", f"7B, {label}: days on 8 A100s")
    r.table(
        "budgets",
        ["7B run", "tokens", "FLOPs (6ND)", "A100 GPU-hours", "days on 8 GPUs"],
        rows,
        caption=f"At {100 * mfu:.0f} % MFU of the A100's dense bf16 peak: what Llama 2 7B's published "
        "GPU-hours imply for its own pretraining",
    )
    r.add("overtrain", d_llama / d_opt, "", "Llama 2 7B tokens / Chinchilla-optimal tokens")
    for count, by_hand in ((1.4e12, (1.4, "trillion")), (6.74e9, (6.74, "billion")), (908e6, (908.0, "million"))):
        r.claim(
            f"{count:.3g} in words = {by_hand[0]:g} {by_hand[1]}, by hand (the pages' number words)",
            in_words(count) == by_hand
            or math.isclose(in_words(count)[0], by_hand[0])
            and in_words(count)[1] == by_hand[1],
            True,
        )
    k_fit, a_fit = table3_fit()
    r.claim(
        "7B's compute-optimal tokens, fed back: Table 3's N_opt = k C^a at C = 6 N D_opt returns 7B",
        k_fit * (FLOPS_PER_PARAM_TOKEN * n7 * d_opt) ** a_fit,
        n7,
        rel_tol=1e-9,
        unit="parameters",
    )
    r.add("pretrain_over_sft", d_llama / d_sft, "", "Llama 2 pretraining tokens / SFT tokens (mean length)")
    sft = entries("scaling_laws")["Llama2-SFT"]
    steps = d_sft / (sft["seq"] * sft["batch_sequences"])
    r.add("sft_steps", steps, "steps", "SFT optimizer steps: tokens / (64 packed windows of 4096)")
    r.claim(
        "SFT: GPU-hours fine-tune / pretraining = their token ratio (same model, same MFU)",
        r.quantities["sft_gpu_hours"].value / r.quantities["llama_gpu_hours"].value,
        d_sft / d_llama,
        rel_tol=1e-9,
        formula="C = 6ND at fixed N",
    )
    r.claim(
        "SFT steps x batch x window = the fine-tune's tokens",
        steps * sft["batch_sequences"] * sft["seq"],
        sft["annotations"] * sft["epochs"] * sft_mean_example_tokens(),
        rel_tol=1e-12,
        unit="tokens",
    )


def _sft_lengths(r: Result, n7: int) -> None:
    """The fine-tune's tokens, steps, GPU-hours and dollars under each length basis: the range the text quotes."""
    rows = []
    for basis, what in SFT_BASES.items():
        b = sft_budget(n7, basis=basis)
        key = basis.replace("-", "_")
        r.add(f"sft_len_{key}", b["mean_example_tokens"], "tokens", f"mean example, {what}")
        add_count(r, f"sft_tokens_{key}", b["tokens"], "tokens", f"SFT tokens, {what}")
        r.add(f"sft_steps_{key}", b["steps"], "steps", f"SFT steps, {what}")
        r.add(f"sft_gpu_hours_{key}", b["gpu_hours"], "GPU-hours", f"SFT A100 GPU-hours, {what}")
        add_usd(r, f"sft_usd_{key}", b["usd"], f"SFT cost, {what}")
        rows.append(
            [
                what,
                f"{b['mean_example_tokens']:,.1f}",
                words(b["tokens"]),
                f"{b['steps']:,.0f}",
                f"{b['gpu_hours']:.3g}",
                usd(b["usd"]),
            ]
        )
    sft = entries("scaling_laws")["Llama2-SFT"]
    r.add("sft_epochs", sft["epochs"], "epochs", "Llama 2-Chat's SFT epochs")
    r.add("sft_upper_ratio", sft_mean_example_tokens("packed-window") / sft_mean_example_tokens(), "", "window / mean")
    r.table(
        "sft",
        [
            "mean length from",
            "tokens per example",
            f"tokens (x {sft['epochs']} epochs)",
            f"steps ({sft['batch_sequences']} x {sft['seq']})",
            "A100 GPU-hours",
            "cost",
        ],
        rows,
        caption=f"Llama 2-Chat's supervised fine-tune of the 7B model, {sft['annotations']:,} examples x "
        f"{sft['epochs']} epochs, packed into {sft['seq']}-token windows; A100 GPU-hours at the MFU Llama 2 7B's "
        "pretraining implies, at the median list price",
    )
    data = entries("sft_data")
    meta = data["llama2-pref-meta"]
    r.claim(
        "Llama 2 Table 6: a whole example (with earlier turns) is longer than one prompt + response",
        meta["tokens_per_example"],
        meta["tokens_per_prompt"] + meta["tokens_per_response"],
        relation=">=",
        unit="tokens",
    )
    lima_total = data["lima-total"]
    r.claim(
        "LIMA: Table 1's lengths x counts = the paper's 'roughly 750,000 tokens' over its 1,000 examples",
        sft_mean_example_tokens("lima") * lima_total["examples"],
        lima_total["total_tokens"],
        rel_tol=0.05,
        unit="tokens",
    )
    r.claim(
        "the packed window is an upper bound: every sourced mean length is below it",
        max(sft_mean_example_tokens(b) for b in SFT_BASES if b != "packed-window"),
        sft_mean_example_tokens("packed-window"),
        relation="<=",
        unit="tokens",
    )


def _dollars(r: Result, n7: int) -> None:
    """GPU-hours x a dated list price: the 7B runs on A100s, and a 1e24-FLOP compute-optimal run on H100s."""
    from distlab.hardware.gpus import gpu

    rows = []
    for g_name, label, key, hours in (
        ("A100-SXM-80GB", "7B, Llama 2 pretraining", "llama", r.quantities["llama_gpu_hours"].value),
        ("A100-SXM-80GB", "7B, Chinchilla-optimal pretraining", "opt", r.quantities["opt_gpu_hours"].value),
        ("A100-SXM-80GB", "7B, Llama 2-Chat fine-tune", "sft", r.quantities["sft_gpu_hours"].value),
        (
            "H100-SXM",
            "compute-optimal run of 1e24 FLOPs (40 % MFU)",
            "c24",
            gpu_hours(1e24, gpu("H100-SXM").peak_flops("bf16"), 0.4),
        ),
    ):
        p = price(g_name)
        cost = dollars(hours, p)
        add_usd(r, f"{key}_usd", cost, f"{label}: GPU-hours x median list price")
        add_usd(r, f"{key}_usd_low", hours * p.low, f"{label}: at the list's lowest price")
        add_usd(r, f"{key}_usd_high", hours * p.high, f"{label}: at the list's highest price")
        r.data[f"{key}_usd"] = cost
        r.add(f"{key}_price", p.usd_per_gpu_hour, "USD/GPU-hour", f"{label}: median {g_name} price")
        rows.append(
            [
                label,
                g_name,
                f"{hours:,.0f}",
                f"${p.usd_per_gpu_hour:.2f} ({p.basis}, {p.first_date} to {p.last_date})",
                usd(cost),
                f"{usd(hours * p.low)} to {usd(hours * p.high)}",
            ]
        )
        r.claim(
            f"{label}: the median price lies within the list's range",
            p.usd_per_gpu_hour,
            p.low,
            relation=">=",
            unit="USD/GPU-hour",
        )
        r.claim(f"{label}: ... and at most its highest", p.usd_per_gpu_hour, p.high, relation="<=")
        if key == "c24":
            r.add("c24_gpu_hours", hours, "GPU-hours", label)
    r.claim(
        "Llama 2 7B pretraining: cost = the paper's published GPU-hours x the median A100 price",
        r.data["llama_usd"],
        value("scaling_laws.Llama2-7B.gpu_hours") * price("A100-SXM-80GB").usd_per_gpu_hour,
        rel_tol=1e-9,
        unit="USD",
        formula="Table 2's 184,320 A100 GPU-hours, not recomputed",
    )
    r.table(
        "dollars",
        ["run", "GPU", "GPU-hours", "price per GPU-hour (dated list)", "cost", "range over the list"],
        rows,
        caption="Cost = GPU-hours x price; prices from distlab/data/gpu_prices.toml (third-party readings of list "
        "prices, dated; spot and market-survey ranges in the range column, not the median)",
    )


def _figure(r: Result, chin: Law, refit: Law) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
    for c in BUDGETS:
        n = np.logspace(7, 12.5, 300)
        d = c / (FLOPS_PER_PARAM_TOKEN * n)
        ok = d > 1e8
        (line,) = ax.plot(n[ok], chin.loss(n[ok], d[ok]), label=f"C = {c:.0e}")
        n_opt, d_opt = optimal(chin, c)
        ax.plot([n_opt], [chin.loss(n_opt, d_opt)], "o", color=line.get_color())
        n_t3, d_t3 = compute_optimal(c)
        ax.plot([n_t3], [chin.loss(n_t3, d_t3)], "x", color=line.get_color(), ms=8)
    ax.set(
        xscale="log",
        xlabel="parameters N",
        ylabel="loss L(N, C/6N), nats/token",
        ylim=(1.8, 4.0),
        title="Iso-FLOP curves, paper's constants\n(o: their minimum, x: Table 3's N)",
    )
    ax.legend(fontsize=7)
    cs = np.logspace(19, 28.2, 60)
    bx.plot(cs, [compute_optimal(c)[0] for c in cs], label="Table 3 power law (≈20 tokens/param)")
    bx.plot(cs, [optimal(chin, c)[0] for c in cs], "--", label="Approach 3, paper's constants")
    bx.plot(cs, [optimal(refit, c)[0] for c in cs], ":", label="Approach 3, Besiroglu et al. refit")
    bx.plot([row["flops"] for row in table3()], [row["params"] for row in table3()], "k.", label="Table 3 rows")
    bx.set(
        xscale="log",
        yscale="log",
        xlabel="training FLOPs C",
        ylabel="compute-optimal N",
        title="Compute-optimal model size",
    )
    bx.legend(fontsize=7)
    fig.tight_layout()
    r.figure(
        "isoflop",
        fig,
        "Left: Chinchilla's fitted loss along iso-FLOP curves (D = C/6N). Right: the optimal "
        "N against compute by three readings of the paper.",
    )
