"""FLOPs per token, MFU and HFU: the estimate, the count, and the mistakes that move the number.

Model FLOPs per token of training (forward + backward), PaLM's form (Chowdhery et al. 2022, "PaLM:
Scaling Language Modeling with Pathways", Appendix B, https://arxiv.org/abs/2204.02311):

    6N + 12 L H Q T  =  6N + 12 L h s        (H heads of size Q, so H Q = h; T = s the sequence length)

6N: every parameter does one multiply-add (2 FLOPs) per token in the forward pass and two in the backward
(gradient for the input and for the weight). 12 L h s: the attention scores QK^T and their product with
V, 4 s h per layer per token forward, x3 with the backward, counted for the full s x s matrix (as the
kernels compute it; a causal model that skips the masked half does half).

MFU (model FLOPs utilisation, PaLM Appendix B) = tokens/s x model FLOPs per token / (GPUs x dense peak).
HFU (hardware FLOPs utilisation) counts what the hardware really did, recomputed forwards included; it
is >= MFU and is not comparable across recompute settings. Report MFU.
"""

from __future__ import annotations

import re
from collections import Counter

from distlab.core.experiments import experiment
from distlab.core.results import Quantity, Result, worst_relative_gap
from distlab.gpu.flops import (
    attention_flops_per_token,
    flops_per_token,
    hardware_flops_per_token,
    mfu,
    preset_matmul_params,
)
from distlab.hardware.gpus import data_claims, gpu

# ---------------------------------------------------------------- the estimate


# ---------------------------------------------------------------- the count on a real model
def matmul_params(cfg) -> int:
    """Parameters that take part in a matrix multiply in distlab.models.gpt.GPT: the weight matrices of every
    block and the output head. Embedding lookups, position embeddings, biases and norms do no matmul."""
    h, f = cfg.hidden, cfg.ffn_width
    return cfg.layers * (4 * h * h + 2 * h * f) + cfg.vocab * h


def counted_flops_closed_form(cfg, tokens: int, recompute: bool = False) -> int:
    """What torch.utils.flop_counter must count for one forward + backward of GPT(cfg) on `tokens`
    tokens: 6 x matmul parameters + 12 L s h per token; a block recompute (PyTorch's early-stopping
    checkpoint) adds each block's forward except its last matmul, the MLP down projection."""
    h, f, L, s = cfg.hidden, cfg.ffn_width, cfg.layers, cfg.seq
    total = tokens * (6 * matmul_params(cfg) + 12 * L * s * h)
    if recompute:
        total += tokens * (2 * L * (4 * h * h + h * f) + 4 * L * s * h)
    return total


def _model(cfg, recompute: bool, device: str):
    import torch
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    from distlab.models.gpt import GPT

    class Recomputed(nn.Module):
        def __init__(self, block):
            super().__init__()
            self.block = block

        def forward(self, x):
            return checkpoint(self.block, x, use_reentrant=False)

    torch.manual_seed(0)
    model = GPT(cfg).to(device)
    if recompute:
        model.blocks = nn.ModuleList(Recomputed(b) for b in model.blocks)
    return model


def count_flops(cfg, batch: int, *, recompute: bool = False, device: str = "cpu") -> tuple[int, Counter]:
    """Matmul FLOPs of one real forward + backward (torch.utils.flop_counter), and the elements written by
    the non-matmul operations (softmax, norms, GELU, embeddings, loss, elementwise) in the same pass."""
    from torch.utils.flop_counter import FlopCounterMode

    from distlab.models.gpt import random_batch

    model = _model(cfg, recompute, device)
    x, y = random_batch(cfg, batch, device=device)
    elements = _ElementCounter()
    with FlopCounterMode(display=False) as counter, elements:
        model(x, y).backward()
    return counter.get_total_flops(), elements.counts


ELEMENTWISE = {"add", "mul", "div", "sub", "neg", "masked_fill", "where", "sum"}


def _group(op: str) -> str | None:
    """Which non-matmul family an aten op belongs to (None: a matmul, a view, a copy or a fill)."""
    op = op.rstrip("_")
    if "log_softmax" in op or "nll_loss" in op:
        return "loss (log-softmax, NLL)"
    for key, group in (
        ("softmax", "attention softmax"),
        ("layer_norm", "layer norm"),
        ("gelu", "GELU"),
        ("embedding", "embedding lookup"),
    ):
        if key in op:
            return group
    return "elementwise (residual adds, scaling, masking, bias sums)" if op in ELEMENTWISE else None


def _ElementCounter():
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class ElementCounter(TorchDispatchMode):
        """Output elements written by the non-matmul ops, by family: at least one FLOP (and a memory
        round trip) each, and invisible to a matmul FLOP count."""

        def __init__(self):
            super().__init__()
            self.counts: Counter = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            group = _group(func.overloadpacket.__name__)
            if group:
                self.counts[group] += sum(t.numel() for t in tree_leaves(out) if hasattr(t, "numel"))
            return out

    return ElementCounter()


def non_matmul_closed_form(cfg, batch: int) -> dict[str, int]:
    """The elements _ElementCounter must see in one forward + backward of GPT(cfg) on `batch` sequences, worked
    out by hand from the model's code, op by op (T = batch x s tokens, S = batch x heads x s x s scores)."""
    s, h, f, v, L = cfg.seq, cfg.hidden, cfg.ffn_width, cfg.vocab, cfg.layers
    T, S = batch * s, batch * cfg.heads * s * s
    return {
        "GELU": 2 * L * T * f,  # gelu and its backward, (T, f) each
        "attention softmax": 2 * L * S,  # softmax and its backward
        # 2L + 1 norms: forward writes y (T, h) plus a mean and an rstd per token; backward dx (T, h), dw and db (h)
        "layer norm": (2 * L + 1) * (T * h + 2 * T + T * h + 2 * h),
        # token (T, h) and position (s, h) lookups; backward: the position table's and the token table's gradients
        "embedding lookup": T * h + s * h + s * h + v * h,
        # log-softmax, its backward and NLL's backward (T, V) each; NLL forward: the loss and its total weight
        "loss (log-softmax, NLL)": 3 * T * v + 2,
        "elementwise (residual adds, scaling, masking, bias sums)": (
            (4 * L + 1) * T * h  # embedding sum and 2 residual adds per block, and their 2L gradient sums
            + (v * h if cfg.tie_embeddings else 0)  # the tied table's two gradients added
            + 4 * L * S  # the 1/sqrt(d) scaling and the mask, forward and backward
            + L * (3 * h + h + f + h)  # bias gradients: qkv, attention out, MLP up, MLP down
            + s * h  # the position gradient summed over the batch
        ),
    }


def flops_by_hand(vocab: int, seq: int, layers: int, hidden: int, recompute: bool = False) -> float:
    """Matmul FLOPs per token, float64, f = 4h: 6 x (12Lh² + Vh) + 12Lsh; a full block recompute adds the forward
    again less each block's MLP down projection, 2L(4h² + 4h²) + 4Lsh."""
    h, L, s = float(hidden), float(layers), float(seq)
    plain = 6 * (L * 12 * h * h + vocab * h) + 12 * L * s * h
    return plain + recompute * L * (16 * h * h + 4 * s * h)


def _misprinted(pairs) -> int:
    """How many printed numbers differ from their reference by more than half a unit of their last digit."""
    bad = 0
    for text, ref in pairs:
        found = re.search(r"-?[\d,]*\.?\d+", str(text))
        digits = found.group().replace(",", "") if found else "nan"
        decimals = len(digits.partition(".")[2])
        bad += not abs(float(digits) - ref) <= 0.5 * 10.0**-decimals * (1 + 1e-9)
    return bad


SHAPES = {  # small GPTs with awkward sizes: an untied head, a sequence of 257, width 96 with 3 heads
    "tied, s=128": dict(vocab=512, seq=128, layers=2, hidden=128, heads=4),
    "untied, s=257": dict(vocab=1000, seq=257, layers=3, hidden=96, heads=3, tie_embeddings=False),
    "tied, s=512": dict(vocab=2048, seq=512, layers=4, hidden=256, heads=8),
}
COUNT_BATCH = 2  # sequences in each counted forward + backward: an input the tables' captions state
ESTIMATE_REL_TOL = 0.25  # tiny models: embeddings and biases are a large share of N (see the table)
PRESET_REL_TOL = 0.03  # published shapes: they are not
TRAIN = {  # the model whose training step the worked MFU times
    "cpu": dict(cfg=dict(vocab=1024, seq=128, layers=4, hidden=192, heads=4), batch=4, steps=5),
    "cuda": dict(cfg=dict(vocab=32768, seq=1024, layers=12, hidden=1024, heads=16), batch=8, steps=5),
}
# The mistakes scenario: a 7B fine-tune on 8 H100s reporting this throughput. Inputs, not results.
SCENARIO = dict(
    model="7B", gpus=8, gpu="H100-SXM", tokens_per_s_per_gpu=8000, pad_fraction=0.25, hard_coded_gpu="A100-SXM-80GB"
)


def training_step(cfg, batch: int, device: str, *, recompute: bool = False):
    """A zero-argument function running one full AdamW training step (forward, backward, optimizer)."""
    import torch

    from distlab.models.gpt import random_batch

    model = _model(cfg, recompute, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x, y = random_batch(cfg, batch, device=device)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


@experiment("flop-count", "FLOPs of a real transformer's forward+backward counted vs 6N + 12Lhs; a measured MFU")
def flop_count(device: str) -> Result:
    """CPU: one core for the timed part, like the roofline it is compared with."""
    from distlab.runtime.threads import one_core

    with one_core(device):
        return _flop_count(device)


def _flop_count(device: str) -> Result:
    from distlab.models.gpt import GPTConfig, param_count

    r = Result("flop-count")
    batch, rows, counts = COUNT_BATCH, [], {}
    for label, kw in SHAPES.items():
        cfg = GPTConfig(**kw)
        tokens = batch * cfg.seq
        counted, elements = count_flops(cfg, batch, device=device)
        counts[label] = (counted, elements, tokens)
        n, n_mm = param_count(cfg), matmul_params(cfg)
        estimate = flops_per_token(n, cfg.layers, cfg.hidden, cfg.seq)
        per_token = counted / tokens
        r.claim(
            f"{label}: counted FLOPs = 6 x matmul params + 12Lsh per token",
            counted,
            counted_flops_closed_form(cfg, tokens),
            formula="flop_counter vs closed form",
        )
        r.claim(
            f"{label}: 6N + 12Lsh within {ESTIMATE_REL_TOL:.0%} of the count",
            estimate,
            per_token,
            rel_tol=ESTIMATE_REL_TOL,
            unit="FLOP",
            formula="PaLM estimate vs counted",
        )
        r.claim(
            f"{label}: estimate - count = 6 x (parameters that do no matmul)",
            estimate - per_token,
            6 * (n - n_mm),
            rel_tol=1e-12,
            unit="FLOP",
        )
        rows.append(
            [
                label,
                f"L={cfg.layers}, h={cfg.hidden}, heads={cfg.heads}, V={cfg.vocab}",
                n,
                n - n_mm,
                Quantity(per_token, "FLOP"),
                Quantity(estimate, "FLOP"),
                f"{estimate / per_token:.3f}",
                f"{6 * n / per_token:.3f}",
            ]
        )
    r.table(
        "shapes",
        [
            "model",
            "shape",
            "N",
            "params with no matmul",
            "counted FLOPs/token",
            "6N + 12Lhs",
            "estimate / count",
            "6N alone / count",
        ],
        rows,
        caption=f"Forward + backward of a real GPT (distlab.models.gpt) on {batch} sequences, counted by "
        "torch.utils.flop_counter.",
    )
    # the no-matmul column by hand: position embeddings s h; per block the biases (QKV 3h, projection h, MLP f + h)
    # and two LayerNorms (4h), 13h with f = 4h; the final LayerNorm (2h); the token embedding when the head does
    # not share it
    by_hand = [
        kw["seq"] * kw["hidden"]
        + kw["layers"] * (9 * kw["hidden"] + 4 * kw["hidden"])
        + 2 * kw["hidden"]
        + (0 if kw.get("tie_embeddings", True) else kw["vocab"] * kw["hidden"])
        for kw in SHAPES.values()
    ]
    ratios = [
        (float(cell), want)
        for row in rows
        for cell, want in ((row[6], row[5].value / row[4].value), (row[7], 6 * row[2] / row[4].value))
    ]
    r.claim(
        "the table's two ratio columns against its FLOP and N cells, divided: worst gap (3 decimals)",
        max(abs(got - want) for got, want in ratios),
        0.0,
        abs_tol=0.0005 + 1e-12,
    )
    r.claim(
        "the parameters with no matmul, each shape's row by hand: worst gap",
        worst_relative_gap([(row[3], want) for row, want in zip(rows, by_hand, strict=True)]),
        0.0,
        abs_tol=1e-12,
    )

    cfg = GPTConfig(**SHAPES["tied, s=128"])
    tokens = batch * cfg.seq
    plain, _ = count_flops(cfg, batch, device=device)
    recomputed, _ = count_flops(cfg, batch, recompute=True, device=device)
    r.claim(
        "full recompute: counted FLOPs = closed form (forward again, less each block's last matmul)",
        recomputed,
        counted_flops_closed_form(cfg, tokens, recompute=True),
    )
    ratio = r.add("recompute_ratio", recomputed / plain, "", "hardware / model FLOPs with full recompute (counted)")
    shape = (cfg.vocab, cfg.seq, cfg.layers, cfg.hidden)
    r.claim(
        "... over the plain step = float64 by hand",
        ratio,
        flops_by_hand(*shape, True) / flops_by_hand(*shape),
        rel_tol=1e-12,
    )
    r.add("recompute_ratio_textbook", 4 / 3, "", "(8N + 16Lhs) / (6N + 12Lhs)")
    # The same count at a 7B GPT's shape (h 4096, 32 layers, f = 4h, vocabulary 32000, s 4096): the output head is
    # a small share of N there, so the ratio comes close to the textbook third, less each block's down projection.
    big = GPTConfig(vocab=32000, seq=4096, layers=32, hidden=4096, heads=32)
    ratio_7b = counted_flops_closed_form(big, big.seq, recompute=True) / counted_flops_closed_form(big, big.seq)
    r.add("recompute_ratio_7b", ratio_7b, "", "the same count at a 7B GPT's shape (closed form)")
    r.claim(
        "at a 7B GPT's shape full recompute adds a forward less each block's down projection and the head",
        ratio_7b,
        flops_by_hand(32000, 4096, 32, 4096, True) / flops_by_hand(32000, 4096, 32, 4096),
        rel_tol=1e-12,
        formula="1 + L(2(4h² + hf) + 4sh) / (6N + 12Lsh), f = 4h",
    )
    r.claim("... which stays below the textbook 4/3", ratio_7b, 4 / 3, relation="<=")
    n, lhs = 12 * 32 * 4096**2 + 32000 * 4096, 32 * 4096 * 4096  # the 7B GPT's N (12Lh^2 + Vh) and L h s
    r.claim(
        "the textbook ratio shown = a whole forward (2N + 4Lhs) again over 6N + 12Lhs, at the 7B GPT's shape",
        r.quantities["recompute_ratio_textbook"].value,
        (8 * n + 16 * lhs) / (6 * n + 12 * lhs),
        rel_tol=1e-12,
    )

    counted, elements, tokens = counts["tied, s=512"]
    rows = [[g, f"{e / tokens:,.0f}", f"{1000 * e / counted:.2f}"] for g, e in elements.most_common()]
    r.table(
        "non_matmul",
        ["operation family", "elements written per token", "per 1,000 matmul FLOPs"],
        rows,
        caption=f"Non-matmul work in the same forward + backward ('tied, s=512' model, {batch} sequences): elements "
        "written, each at least one FLOP and one trip to memory, none of them in the matmul count.",
    )
    share = r.add(
        "non_matmul_per_1000",
        1000 * sum(elements.values()) / counted,
        "",
        "non-matmul elements written per 1,000 matmul FLOPs",
    )
    wide = GPTConfig(**SHAPES["tied, s=512"])
    ref, flops = non_matmul_closed_form(wide, batch), flops_by_hand(wide.vocab, wide.seq, wide.layers, wide.hidden)
    flops *= batch * wide.seq
    cells = [(row[1], ref.get(row[0], -1) / (batch * wide.seq)) for row in rows]
    cells += [(row[2], 1000 * ref.get(row[0], -1) / flops) for row in rows]
    r.claim(
        "non-matmul elements = op-by-op closed form (numbers off)",
        _misprinted(cells) + (elements != Counter(ref)) + (abs(share / (1000 * sum(ref.values()) / flops) - 1) > 1e-12),
        0,
    )

    _presets(r)
    _worked_mfu(r, device)
    _mistakes(r)
    return r


def _presets(r: Result) -> None:
    from distlab.models.shapes import presets

    rows = []
    for name, m in presets().items():
        n, n_mm = m.params(), preset_matmul_params(m)
        est = flops_per_token(n, m.layers, m.hidden, m.seq)
        exact = 6 * n_mm + attention_flops_per_token(m.layers, m.hidden, m.seq)
        attention_share = attention_flops_per_token(m.layers, m.hidden, m.seq) / est
        r.claim(
            f"{m.name}: 6N + 12Lhs within {PRESET_REL_TOL:.0%} of the matmul count",
            est,
            exact,
            rel_tol=PRESET_REL_TOL,
            unit="FLOP",
            formula="6 x matmul params + 12Lhs",
        )
        rows.append(
            [
                m.name,
                f"{n / 1e9:.2f} B",
                m.seq,
                Quantity(est, "FLOP"),
                f"{100 * (est / exact - 1):.1f} %",
                f"{100 * attention_share:.1f} %",
            ]
        )
        if name == "7B":
            r.add("7b_attention_share", attention_share, "fraction", "7B at s=4096: attention share of FLOPs/token")
    # read back: N against the checkpoints' own counts (to the printed 0.01 B), the attention share against
    # 12 L h s over the printed estimate (to the printed 0.1 %)
    from distlab.models.shapes import published_params

    gaps = []
    for row, (name, m) in zip(rows, presets().items(), strict=True):
        gaps.append(
            abs(float(row[5].removesuffix(" %")) - 100 * 12 * m.layers * m.hidden * m.seq / row[3].value) - 0.05
        )
        if published := published_params(name):
            gaps.append(abs(float(row[1].removesuffix(" B")) - published / 1e9) - 0.005)
    r.claim(
        "the shapes' N (checkpoints' counts) and attention share (12Lhs over the estimate), read back: worst excess",
        max(gaps),
        0.0,
        relation="<=",
        abs_tol=1e-9,
    )
    r.table(
        "presets",
        ["model", "N", "s", "6N + 12Lhs per token", "over the matmul count", "attention term share"],
        rows,
        caption="Published shapes (distlab/data/models.toml): the estimate against a count of the weights "
        "that multiply (closed form).",
        kind="computed",
    )


def _worked_mfu(r: Result, device: str) -> None:
    import statistics

    import torch

    from distlab.core.experiments import device_name
    from distlab.gpu.roofline import Kernel, gemm_kernel, time_kernels
    from distlab.hardware.gpus import match_device
    from distlab.models.gpt import GPTConfig, param_count

    spec = TRAIN[device]
    cfg, batch = GPTConfig(**spec["cfg"]), spec["batch"]
    tokens = batch * cfg.seq
    n = param_count(cfg)
    model_flops = flops_per_token(n, cfg.layers, cfg.hidden, cfg.seq)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    # The peak and both training steps timed in interleaved rounds (medians), so machine load hits all alike.
    kernels = [
        gemm_kernel("ceiling", 1024 if device == "cpu" else 8192, dtype, device),
        Kernel("plain", training_step(cfg, batch, device), 0, 0),
        Kernel("recompute", training_step(cfg, batch, device, recompute=True), 0, 0),
    ]
    rounds = time_kernels(kernels, device, rounds=spec["steps"])
    times = {k: statistics.median(v) for k, v in rounds.items()}  # what the page shows
    best = {k: min(v) for k, v in rounds.items()}  # what the recompute claim compares: steadier under load
    peak = kernels[0].flops / times["ceiling"]
    chip = match_device(device_name(device)) if device == "cuda" else None
    hw_plain = count_flops(cfg, 1, device=device)[0] / cfg.seq
    hw_rc = count_flops(cfg, 1, recompute=True, device=device)[0] / cfg.seq
    tps, tps_rc = tokens / times["plain"], tokens / times["recompute"]
    m_plain, m_rc = mfu(tps, model_flops, 1, peak), mfu(tps_rc, model_flops, 1, peak)
    h_plain, h_rc = mfu(tps, hw_plain, 1, peak), mfu(tps_rc, hw_rc, 1, peak)
    r.add("train_params", n, "params", "parameters of the timed model")
    r.add("train_vocab", cfg.vocab, "", "vocabulary")
    numel = sum(p.numel() for p in _model(cfg, False, "cpu").parameters())  # the tied table counted once
    r.claim(
        "timed model: N, 6N + 12Lhs = its torch module's count, by hand (off)",
        (n != numel) + (abs(model_flops / (6.0 * numel + 12.0 * cfg.layers * cfg.hidden * cfg.seq) - 1) > 1e-12),
        0,
    )
    r.add("train_layers", cfg.layers, "", "layers")
    r.add("train_hidden", cfg.hidden, "", "width")
    r.add("train_seq", cfg.seq, "tokens", "sequence length")
    r.add("train_batch", batch, "", "sequences per step")
    r.add("train_flops_per_token", model_flops, "FLOP", "6N + 12Lhs of the timed model")
    r.add("train_peak", peak, "FLOP/s", "measured matmul ceiling used as peak")
    r.add("train_tokens_per_s", tps, "tokens/s", "training throughput (median step)")
    r.add("train_achieved", tps * model_flops, "FLOP/s", "achieved model FLOP/s")
    r.add("train_mfu", m_plain, "fraction", "MFU against the measured matmul ceiling")
    r.add("train_tokens_per_s_recompute", tps_rc, "tokens/s", "throughput with full recompute")
    r.add("train_mfu_recompute", m_rc, "fraction", "MFU with full recompute")
    r.add("train_hfu_recompute", h_rc, "fraction", "HFU with full recompute")
    sheet = ""
    if chip:
        sheet_mfu = mfu(tps, model_flops, 1, chip.peak_flops("bf16"))
        r.add("train_mfu_datasheet", sheet_mfu, "fraction", f"MFU against the {chip.name} dense bf16 peak")
        sheet = f" (against the {chip.name} datasheet's dense bf16 peak: {100 * sheet_mfu:.1f} %)"
    # Timed (kind="timing"): a small model's step runs at ~30 % of its own matmul ceiling, far below the 100 %
    # bounds; recompute does ~(8N + 16Lhs) / (6N + 12Lhs) = 4/3 the work, so its MFU sits near 3/4 of the plain one.
    r.claim("measured MFU at most 100 % of the measured matmul ceiling", m_plain, 1.0, relation="<=", kind="timing")
    r.claim("recompute run: HFU at most 100 %", h_rc, 1.0, relation="<=", kind="timing")
    r.claim(  # MFU ratio = plain step time / recompute step time, best rounds (medians swung by 25 % under load)
        "recompute run: lower MFU than without (same model FLOPs, more work; best rounds)",
        best["plain"] / best["recompute"],
        1.0,
        relation="<=",
        rel_tol=0.05,
        formula="t_plain / t_recompute, about 3/4: the recompute runs the forward again",
        kind="timing",
    )
    r.table(
        "worked_mfu",
        ["run", "tokens/s", "FLOPs/token counted as", "MFU", "HFU"],
        [
            [
                "no recompute",
                f"{tps:,.0f}",
                "6N + 12Lhs (model) / counted (hardware)",
                f"{100 * m_plain:.1f} %",
                f"{100 * h_plain:.1f} %",
            ],
            [
                "full recompute",
                f"{tps_rc:,.0f}",
                "6N + 12Lhs (model) / counted (hardware)",
                f"{100 * m_rc:.1f} %",
                f"{100 * h_rc:.1f} %",
            ],
        ],
        caption="MFU = tokens/s x FLOPs per token / peak; here the peak is the measured matmul ceiling of the "
        "same device" + sheet,
    )


def _mistakes_by_hand(n, layers, hidden, seq, tokens_per_s, gpus, pad, peaks) -> list[float]:
    """The mistakes table's MFUs in float64, each written out: tokens/s x FLOPs per token / (GPUs x peak); `peaks`:
    dense bf16, sparse bf16, fp8, fp32, the hard-coded chip's bf16."""
    model = 6.0 * n + 12.0 * layers * hidden * seq
    dense, sparse, fp8, fp32, hard = peaks
    return [
        tokens_per_s * model / (gpus * dense),
        tokens_per_s * model / (gpus * sparse),
        tokens_per_s * model / (gpus * fp8),
        tokens_per_s * model / (gpus * fp32),
        tokens_per_s * model / (gpus * hard),
        tokens_per_s / (1 - pad) * model / (gpus * dense),  # padded positions counted as tokens
        tokens_per_s * (8.0 * n + 16.0 * layers * hidden * seq) / (gpus * dense),  # forwards counted twice
        tokens_per_s * 6.0 * n / (gpus * dense),
    ]


def _mistakes(r: Result) -> None:
    from distlab.models.published import claim_llama2_context
    from distlab.models.shapes import preset

    s = SCENARIO
    m, chip = preset(s["model"]), gpu(s["gpu"])
    data_claims(r, [s["gpu"], s["hard_coded_gpu"]])  # the mistakes table is made of their peaks
    n, tps = m.params(), s["tokens_per_s_per_gpu"] * s["gpus"]
    right = flops_per_token(n, m.layers, m.hidden, m.seq)
    peak = chip.peak_flops("bf16")
    correct = mfu(tps, right, s["gpus"], peak)
    hard = gpu(s["hard_coded_gpu"])
    cases = [
        ("none (dense bf16 peak, 6N + 12Lhs, real tokens)", correct),
        ("sparse peak instead of dense", mfu(tps, right, s["gpus"], chip.bf16_sparse_flops)),
        ("the fp8 peak for a bf16 run", mfu(tps, right, s["gpus"], chip.peak_flops("fp8"))),
        ("the fp32 (vector) peak for a bf16 run", mfu(tps, right, s["gpus"], chip.peak_flops("fp32"))),
        (f"a peak hard-coded for {hard.name}", mfu(tps, right, s["gpus"], hard.peak_flops("bf16"))),
        (
            f"counting padding tokens ({s['pad_fraction']:.0%} of each batch)",
            mfu(tps / (1 - s["pad_fraction"]), right, s["gpus"], peak),
        ),
        (
            "recomputed forwards counted as model FLOPs (HFU reported as MFU)",
            mfu(tps, hardware_flops_per_token(n, m.layers, m.hidden, m.seq, "full"), s["gpus"], peak),
        ),
        ("6N without the attention term", mfu(tps, 6 * n, s["gpus"], peak)),
    ]
    rows = [[name, f"{100 * v:.1f} %" + (" (impossible)" if v > 1 else ""), f"{v / correct:.2f}"] for name, v in cases]
    r.table("mistakes", ["mistake", "reported MFU", "x the right value"], rows, kind="computed")
    r.add("scenario_tokens_per_s_per_gpu", s["tokens_per_s_per_gpu"], "tokens/s", "scenario throughput per GPU")
    r.add("scenario_gpus", s["gpus"], "GPUs", "scenario GPUs")
    r.add("seq_7b", m.seq, "tokens", "7B's context: the scenario's s")
    r.add("scenario_flops_per_token", right, "FLOP", "7B at s=4096: 6N + 12Lhs")
    r.add("scenario_mfu", correct, "fraction", "scenario MFU")
    r.add("scenario_pad_fraction", s["pad_fraction"], "fraction", "padding share")
    # the same scenario as `distlab mfu` arguments (bare numbers, for the page's command line)
    for key, value in (
        ("params", n),
        ("tokens_total", tps),
        ("layers", m.layers),
        ("hidden", m.hidden),
        ("seq", m.seq),
    ):
        r.add(f"cli_{key}", value, "", f"scenario as a CLI argument: {key}")
    claim_llama2_context(r, m)  # the scenario's s is the model's published context
    peaks = [chip.peak_flops("bf16"), chip.bf16_sparse_flops, chip.peak_flops("fp8"), chip.peak_flops("fp32")]
    total = s["tokens_per_s_per_gpu"] * s["gpus"]
    ref = _mistakes_by_hand(
        n, m.layers, m.hidden, m.seq, total, s["gpus"], s["pad_fraction"], [*peaks, hard.peak_flops("bf16")]
    )
    cells = [(row[1], 100 * v) for row, v in zip(rows, ref)] + [(row[2], v / ref[0]) for row, v in zip(rows, ref)]
    q = {
        k: r.quantities[k].value
        for k in ("scenario_mfu", "scenario_flops_per_token", "cli_tokens_total", "7b_attention_share")
    }
    by_hand = [ref[0], 6.0 * n + 12.0 * m.layers * m.hidden * m.seq, total]
    by_hand.append(12.0 * m.layers * m.hidden * m.seq / by_hand[1])
    r.claim(
        "7B scenario, mistakes table = float64 by hand (numbers off)",
        _misprinted(cells)
        + sum(("impossible" in row[1]) != (v > 1) for row, v in zip(rows, ref))
        + sum(abs(a / b - 1) > 1e-12 for a, b in zip(q.values(), by_hand))
        + (len(rows) != len(ref)),
        0,
    )
