"""Chapter 3's numbers worked by hand, apart from distlab.memory.activations and the experiments' own arithmetic:
Korthikanti et al. 2022's Table 2 expressions typed out here, Llama 2 7B's shape from its released config.json,
its own layer from appendix 03's hand-collected closed form (distlab.memory.activation_closed_form), GPT-3's shape
from the paper's printed sentences, the parameter count from the released checkpoint and the GPU's memory from
MLPerf's system description (a second source beside the datasheet).

Each function compares what an experiment of the page put in its Result with these references, as claims.
"""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

from distlab.core.facts import value
from distlab.core.results import Result

# Llama 2 7B's released config.json (meta-llama/Llama-2-7b-hf): num_hidden_layers, hidden_size,
# num_attention_heads (= num_key_value_heads), intermediate_size, vocab_size; SwiGLU, RMSNorm, no dropout
LLAMA2_7B = {"layers": 32, "hidden": 4096, "heads": 32, "ffn": 11008, "vocab": 32000}
PAGE_T = 8  # the tensor-parallel size at which the page evaluates Table 2 ("at t = 8" in its prose)
MAX_MICRO_BATCH = 64  # the largest micro-batch the fit search tries (the page's "0" means not even one fits)


def _gap(pairs: list[tuple[float, float]]) -> float:
    """Largest relative gap of shown from expected over the pairs (0 when all agree; inf when one is missing)."""
    gaps = [abs(m - e) / abs(e) if e else abs(m) for m, e in pairs]
    return math.inf if any(math.isnan(g) for g in gaps) else max(gaps)


def _v(cell) -> float:
    return float(getattr(cell, "value", cell))


def hbm_bytes() -> float:
    """H100 SXM's memory from MLPerf's system description, a second source beside the datasheet's hbm_gb."""
    return value("gpus.H100-SXM.mlperf_memory_gb") * 1e9


def table2(recompute: str, sp: bool, t: int, s: int, b: int, h: int, a: int) -> float:
    """Korthikanti et al. 2022, Table 2, per layer, as the paper prints each row (full recompute with sequence
    parallelism, 2sbh/t, is the site's extension the page marks)."""
    if recompute == "full":
        return 2 * s * b * h / (t if sp else 1)
    if recompute == "selective":
        return 34 * s * b * h / t if sp else s * b * h * (10 + 24 / t)
    return s * b * h / t * (34 + 5 * a * s / h) if sp else s * b * h * (10 + 24 / t + 5 * a * s / (h * t))


# label of the activations-7b table's row -> (recompute, sequence parallel); t is 1 for "no parallelism", else PAGE_T
TABLE2_ROWS = {
    "no parallelism": ("none", False),
    "no parallelism, selective recompute": ("selective", False),
    "no parallelism, full recompute": ("full", False),
    "tensor parallel": ("none", False),
    "tensor + sequence parallel": ("none", True),
    "tensor parallel, selective recompute": ("selective", False),
    "tensor + sequence parallel, selective recompute": ("selective", True),
    "full recompute (tensor parallel)": ("full", False),
    "full recompute (tensor + sequence parallel)": ("full", True),
}
QUANTITY_ROWS = {  # the activations-7b quantity key -> its row of Table 2
    "none": "no parallelism",
    "selective": "no parallelism, selective recompute",
    "full": "no parallelism, full recompute",
    "tp": "tensor parallel",
    "tp_sp": "tensor + sequence parallel",
    "tp_sp_selective": "tensor + sequence parallel, selective recompute",
}


def _t(label: str) -> int:
    return 1 if label.startswith("no parallelism") else PAGE_T


def llama2_7b_layer(s: int, b: int, attention: str, recompute: str = "none") -> int:
    """One Llama 2 7B layer by appendix 03's closed form, at the config's shape typed above."""
    from distlab.memory.activation_closed_form import expected

    shape = {k: LLAMA2_7B[k] for k in ("hidden", "heads", "ffn")}
    m = SimpleNamespace(
        **shape, kv=LLAMA2_7B["heads"], experts=0, norm_kind="rmsnorm", trains_with_dropout=False, mlp="swiglu"
    )
    return expected(m, s, b, attention, recompute)


def activations_7b(r: Result) -> None:
    """Every number activations-7b shows, against the references above."""
    from distlab.models.published import GPT3_QUOTES, gpt3_table_row, llama2_context
    from distlab.models.shapes import published_params

    q = {k: v.value for k, v in r.quantities.items()}
    get = lambda k: q.get(k, math.nan)  # a missing key fails its claim, it does not raise
    L, h, a, V = (LLAMA2_7B[k] for k in ("layers", "hidden", "heads", "vocab"))
    s = llama2_context()
    r.claim(
        "7B's shape and sequence = Llama 2 7B's config.json, Table 1's 4k",
        _gap([(get("layers"), L), (get("hidden"), h), (get("heads"), a), (get("vocab"), V), (get("seq"), s)]),
        0.0,
        abs_tol=1e-12,
    )
    # Table 2's rows, every cell: t = 1 without parallelism, the page's t = 8 otherwise
    variants = r.tables["variants"]
    batches = [int(re.search(r"\d+", c).group()) for c in variants.columns[3:]]
    pairs, wrong_t = [], 0
    for row in variants.rows:
        rc, sp = TABLE2_ROWS[row[0]]
        t = _t(row[0])
        wrong_t += row[1] != t
        pairs += [(_v(c), L * table2(rc, sp, t, s, b, h, a)) for c, b in zip(row[3:], batches, strict=True)]
    r.claim(
        "Table 2's cells = L x the paper's expressions by hand, t = 1 or 8",
        _gap(pairs) + wrong_t,
        0.0,
        abs_tol=1e-12,
    )
    # the same convention's quantities: totals at b = 1 and 8, 5as/h, the saving, layer over input, s doubled
    pairs = [
        (get(f"{k}_b{b}"), L * table2(*TABLE2_ROWS[row], _t(row), s, b, h, a))
        for b in (1, 8)
        for k, row in QUANTITY_ROWS.items()
    ]
    ratio = 5 * a * s / h  # 5 x 32 x 4096 / 4096 = 160
    pairs += [
        (get("attention_ratio"), ratio),
        (get("selective_saving"), ratio / (34 + ratio)),  # 5as/h of 34 + 5as/h goes
        (get("layer_over_input_none"), (34 + ratio) / 2),  # the layer's sbh(34 + 5as/h) over its input 2sbh
        (get("layer_over_input_selective"), 34 / 2),
        (get("double_seq_none"), 2 * (34 + 2 * ratio) / (34 + ratio)),  # sbh doubles, 5as/h doubles
        (get("double_seq_selective"), 2.0),
    ]
    r.claim(
        "7B totals (b = 1, 8) and ratios by hand: 5as/h = 160, saving 160/194, 97, 17, 2 x 354/194, 2",
        _gap(pairs),
        0.0,
        abs_tol=1e-12,
    )
    # the attention core's share of a layer's forward matmul FLOPs, 4bs²h / (24bsh² + 4bs²h) = 4s / (24h + 4s)
    g3 = gpt3_table_row()
    g3_s = float(re.search(r"= (\d+)", GPT3_QUOTES["context"]).group(1))
    r.claim(
        "core FLOP share 4s/(24h + 4s): 7B (1/7), GPT-3 (Table 2.1's d_model, n_ctx)",
        _gap(
            [
                (get("core_flop_share"), 4 * s / (24 * h + 4 * s)),
                (get("gpt3_core_flop_share"), 4 * g3_s / (24 * g3["hidden"] + 4 * g3_s)),
            ]
        ),
        0.0,
        abs_tol=1e-12,
    )
    # model states over 8 GPUs (ZeRO-3) from the released checkpoint's count; the GPU from MLPerf's description
    params, hbm = published_params("7B"), hbm_bytes()
    assert params is not None
    states = params * (2 + 2 + 4 + 4 + 4) / 8  # bf16 weights and gradients; fp32 master, Adam m and v
    none1 = L * table2("none", False, 1, s, 1, h, a)
    r.claim(
        "7B states over 8 GPUs = checkpoint's count x 16, 18, 20 B / 8; over MLPerf's 80 GB",
        _gap(
            [
                (get("states_zero3_8"), states),
                (get("states_zero3_8_fp32_grads"), params * (2 + 4 + 12) / 8),
                (get("states_zero3_8_fp32_accum"), params * (2 + 2 + 4 + 12) / 8),
                (get("none_b1_over_hbm"), none1 / hbm),
            ]
        ),
        0.0,
        abs_tol=1e-12,
    )
    # every per-sequence size is linear in b: the largest micro-batch is floor((memory - states) / one sequence)
    per_seq = {f"fit_b_{rc}": L * table2(rc, False, 1, s, 1, h, a) for rc in ("none", "selective", "full")}
    per_seq["fit_b_flash"] = L * llama2_7b_layer(s, 1, "flash")
    fits = {k: max(0, min(MAX_MICRO_BATCH, math.floor((hbm - states) / v))) for k, v in per_seq.items()}
    r.claim(
        "micro-batches that fit = floor((80 GB - states) / one sequence)",
        sum(get(k) != want for k, want in fits.items()),
        0,
    )
    # Llama 2 7B's own layer, every cell and the b = 1 values, against appendix 03's closed form
    exact = r.tables["exact"]
    batches = [int(re.search(r"\d+", c).group()) for c in exact.columns[2:]]
    kinds = {  # row label -> (attention, recompute)
        "eager attention, no recompute": ("eager", "none"),
        "FlashAttention, no recompute": ("flash", "none"),
        "FlashAttention, selective recompute": ("flash", "selective"),
        "FlashAttention, t = 8 + sequence parallel": ("flash", "none"),
        "full recompute": ("flash", "full"),
    }
    pairs, wrong_t = [], 0
    for row in exact.rows:
        t = int(re.search(r"t = (\d+)", row[0]).group(1)) if "t = " in row[0] else 1
        wrong_t += row[1] != t
        pairs += [(_v(c), L * llama2_7b_layer(s, b, *kinds[row[0]]) / t) for c, b in zip(row[2:], batches, strict=True)]
    flash1, selective1 = L * llama2_7b_layer(s, 1, "flash"), L * llama2_7b_layer(s, 1, "flash", "selective")
    pairs += [
        (get("exact_eager_b1"), L * llama2_7b_layer(s, 1, "eager")),
        (get("exact_flash_b1"), flash1),
        (get("exact_selective_b1"), selective1),
        (get("exact_flash_vs_paper_selective"), flash1 / (L * 34 * s * h) - 1),  # over the paper's 34sbh per layer
    ]
    r.claim(
        "Llama 2 7B's own layer = L x appendix 03's closed form / t",
        _gap(pairs) + wrong_t,
        0.0,
        abs_tol=1e-12,
    )
    r.claim("fp32 logits = 4 B x 4096 x 32,000", get("logits_b1"), 4 * s * V, unit="B")


def _quoted_int(data: str, key: str, pattern: str) -> int:
    """A number from a data file's source sentence (text, so a typo in the typed field cannot move it)."""
    from distlab.core.facts import source

    return int(re.search(pattern, source(data, key).detail).group(1))


def chunked_ce(r: Result) -> None:
    """chunked-ce's page numbers against the relations its own table prints (peak per logit x N x V = the peak, with
    N and V from the caption) and Llama 3 8B's sequence and vocabulary from the release README and config.json."""
    q = {k: v.value for k, v in r.quantities.items()}
    get = lambda k: q.get(k, math.nan)  # a missing key fails its claim, it does not raise
    table = r.tables["memory"]
    n = int(re.search(r"(\d+) tokens", table.caption).group(1))
    v = int(re.search(r"vocabulary (\d+)", table.caption).group(1))
    naive, chunked = ([_v(c) for c in row[1:]] for row in table.rows)  # saved, peak, peak per logit
    pairs = [(naive[2] * n * v, naive[1]), (chunked[2] * n * v, chunked[1])]
    pairs += [(get("naive_peak"), naive[1]), (get("chunked_peak"), chunked[1])]
    pairs += [(get("naive_bytes_per_logit") * n * v, naive[1]), (get("peak_ratio") * chunked[1], naive[1])]
    r.claim(
        "peak per logit x N x V = the peak (N, V as the caption prints), ratio x chunked = naive",
        _gap(pairs),
        0.0,
        abs_tol=1e-12,
    )
    s = _quoted_int("llama3_models", "llama3-repo", r"sequence length up to ([0-9]+) tokens")
    vocab = _quoted_int("llama3_models", "llama3-config", r"vocab_size ([0-9]+)")
    r.claim(
        "Llama 3 8B (README's 8192, config's 128256): naive = bytes per logit x s x V; chunk = c x V x 4 B",
        _gap(
            [
                (get("llama3_naive_peak"), naive[1] / (n * v) * s * vocab),
                (get("llama3_chunk_logits"), get("chunk") * vocab * 4),
            ]
        ),
        0.0,
        abs_tol=1e-12,
    )
