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
from distlab.core.results import Result, worst_relative_gap

# Llama 2 7B's released config.json (meta-llama/Llama-2-7b-hf): num_hidden_layers, hidden_size,
# num_attention_heads (= num_key_value_heads), intermediate_size, vocab_size; SwiGLU, RMSNorm, no dropout
LLAMA2_7B = {"layers": 32, "hidden": 4096, "heads": 32, "ffn": 11008, "vocab": 32000}
PAGE_T = 8  # the tensor-parallel size at which the page evaluates Table 2 ("at t = 8" in its prose)
MAX_MICRO_BATCH = 64  # the largest micro-batch the fit search tries (the page's "0" means not even one fits)


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
        worst_relative_gap(
            [(get("layers"), L), (get("hidden"), h), (get("heads"), a), (get("vocab"), V), (get("seq"), s)]
        ),
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
        worst_relative_gap(pairs) + wrong_t,
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
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-12,
    )
    # the attention core's share of a layer's forward matmul FLOPs, 4bs²h / (24bsh² + 4bs²h) = 4s / (24h + 4s)
    g3 = gpt3_table_row()
    g3_s = float(re.search(r"= (\d+)", GPT3_QUOTES["context"]).group(1))
    r.claim(
        "core FLOP share 4s/(24h + 4s): 7B (1/7), GPT-3 (Table 2.1's d_model, n_ctx)",
        worst_relative_gap(
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
        worst_relative_gap(
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
        worst_relative_gap(pairs) + wrong_t,
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
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-12,
    )
    s = _quoted_int("llama3_models", "llama3-repo", r"sequence length up to ([0-9]+) tokens")
    vocab = _quoted_int("llama3_models", "llama3-config", r"vocab_size ([0-9]+)")
    r.claim(
        "Llama 3 8B (README's 8192, config's 128256): naive = bytes per logit x s x V; chunk = c x V x 4 B",
        worst_relative_gap(
            [
                (get("llama3_naive_peak"), naive[1] / (n * v) * s * vocab),
                (get("llama3_chunk_logits"), get("chunk") * vocab * 4),
            ]
        ),
        0.0,
        abs_tol=1e-12,
    )
    loss_rows(r)


# ---------------------------------------------------------------- one block, counted (activation-memory)
def block_hand(s: int, b: int, h: int, a: int, k: int) -> dict[str, int]:
    """One GPT block's saves worked by hand: the paper's sbh(34 + 5as/h) (Korthikanti et al. 2022, Section 4.1),
    plus what it leaves out: the causal mask, s² booleans, and two LayerNorms' mean and 1/std, 4sb statistics of
    k bytes. Without dropout the masks (attention's as²b, two residual sbh) and the dropped-out probabilities
    (2as²b, then the softmax output itself) go: 2sbh + 3as²b less. Selective recompute keeps 34sbh + 4sbk; the
    part of a layer saved before its attention core returns (ln1, the qkv input, Q, K, V, the mask, softmax,
    dropped-out probabilities, their mask) is 10sbh + 2sbk + s² + 5as²b."""
    paper = 34 * s * b * h + 5 * a * s * s * b
    extra = s * s + 4 * s * b * k
    return {
        "paper": paper,
        "counted": paper + extra,
        "no_dropout": paper + extra - 2 * s * b * h - 3 * a * s * s * b,
        "selective": 34 * s * b * h + 4 * s * b * k,
        "input": 2 * s * b * h,
        "before_core": 10 * s * b * h + 2 * s * b * k + s * s + 5 * a * s * s * b,
    }


def activation_memory(r: Result) -> None:
    """activation-memory's sweep, term table and quantities against block_hand; gap_7b at Llama 2 7B's shape."""
    from distlab.models.published import llama2_context

    q = {k: v.value for k, v in r.quantities.items()}
    get = lambda k: q.get(k, math.nan)  # a missing key fails its claim, it does not raise
    k = get("norm_stat_bytes")
    pairs, worst = [], 0.0
    for row in r.tables["sweep"].rows:
        s, b, h, a = row[:4]  # the shape each row prints, an input
        want = block_hand(s, b, h, a, k)
        rel = (want["counted"] - want["paper"]) / want["paper"]
        worst = max(worst, rel)
        cells = [_v(c) for c in row[4:]]
        expected = [want["counted"], want["counted"], want["paper"], rel, want["no_dropout"], want["no_dropout"]]
        pairs += list(zip(cells, expected, strict=True))
    pairs.append((get("worst_relative_gap"), worst))
    r.claim(
        "sweep, every cell by hand: sbh(34 + 5as/h) + s² + 4sbk; without dropout 2sbh + 3as²b less",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-12,
    )
    s, b, h, a = (int(get(n)) for n in ("s", "b", "h", "a"))
    want = block_hand(s, b, h, a, k)
    rows = r.tables["terms"].rows
    pairs = [
        (sum(_v(row[3]) for row in rows), want["paper"]),
        (sum(_v(row[4]) for row in rows), want["counted"]),
        (sum(_v(row[5]) for row in rows), want["counted"]),
        (get("main_bytes"), want["counted"]),
        (get("main_published"), want["paper"]),
        (get("main_mask_bytes"), s * s),
        (get("main_stat_bytes"), 4 * s * b * k),
        (get("main_param_bytes"), 2 * (12 * h * h + 4 * h)),  # bf16 weights 12h², LayerNorm weights and biases 4h
    ]
    r.claim(
        "terms table's columns sum to the paper's and the block by hand; mask s², statistics 4sbk, params 2(12h² + 4h)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-12,
    )
    s7, h7, a7 = llama2_context(), LLAMA2_7B["hidden"], LLAMA2_7B["heads"]
    r.claim(
        "gap at Llama 2 7B's shape, b = 1: (s² + 4sk) / (34sh + 5as²)",
        get("gap_7b"),
        (s7 * s7 + 4 * s7 * k) / (34 * s7 * h7 + 5 * a7 * s7 * s7),
        rel_tol=1e-12,
    )


def per_token_figure(r: Result, ax, h: int, a: int, b: int, k: int) -> None:
    """The per-token figure's lines read back: published 34 + 5as/h, formula and counted points that plus
    (s² + 4sbk)/(sbh), and the horizontal 34 (h, a, b as its caption prints)."""
    pairs = []
    for line in ax.get_lines():
        label, xs, ys = line.get_label(), line.get_xdata(), line.get_ydata()
        for s, y in zip(xs, ys, strict=True):
            paper = 34 + 5 * a * s / h
            if label.startswith("34"):
                want = 34.0
            elif label.startswith("published"):
                want = paper
            else:
                want = paper + (s * s + 4 * s * b * k) / (s * b * h)
            pairs.append((float(y), want))
    r.claim("per-token figure: every drawn point by hand (largest gap)", worst_relative_gap(pairs), 0.0, abs_tol=1e-12)


# ---------------------------------------------------------------- checkpointing
def _stack(r: Result) -> tuple:
    """(L, s, b, h, a, block_hand) of the checkpointing stack, as the variants table's caption prints them."""
    caption = r.tables["variants"].caption
    shape = re.search(r"(\d+) bf16 blocks, s = (\d+), b = (\d+), h = (\d+), a = (\d+)", caption)
    L, s, b, h, a = (int(x) for x in shape.groups())  # inputs the caption prints
    k = 2 if "(cpu)" in caption else 4  # LayerNorm statistics: bf16 on CPU, fp32 on CUDA
    return L, s, b, h, a, block_hand(s, b, h, a, k)


def first_n_peak(L: int, n: int, layer: int, inp: int) -> int:
    """The first n of L layers checkpointed one by one: after the forward n inputs and L - n layers' saves; while
    layer j (1-based) is recomputed, the j - 1 inputs below it and its own layer's saves."""
    return max([n * inp + (L - n) * layer] + [(j - 1) * inp + layer for j in range(1, n + 1)])


def tradeoff_figure(r: Result, fig) -> None:
    """The memory-against-recompute figure read back: left, the first-n points at (n/L, peak in MB) and each segment
    point at (1, peak) with its "k=" label; right, the chain's L/k - 1 + k, the stack's peak over one input, and
    the line at k = sqrt(chain length)."""
    L, _, _, _, _, want = _stack(r)
    layer, inp = want["counted"], want["input"]
    seg_peak = lambda k: (L // k - 1) * inp + k * layer
    n_chain = int(r.quantities["chain_layers"].value)
    ax1, ax2 = fig.axes[:2]
    pairs, wrong = [], 0
    for line in ax1.get_lines():
        xs, ys = line.get_xdata(), line.get_ydata()
        if line.get_label().startswith("checkpoint the first"):
            pairs += [(y, first_n_peak(L, round(x * L), layer, inp) / 1e6) for x, y in zip(xs, ys, strict=True)]
        elif len(xs):  # a segment's point: recompute one forward, its peak one of the hand-worked ones
            wrong += not any(abs(ys[0] - seg_peak(k) / 1e6) < 1e-9 for k in range(1, L + 1) if L % k == 0)
            pairs.append((xs[0], 1.0))
    for t in ax1.texts:
        k = int(t.get_text().removeprefix("k="))
        pairs += [(t.xy[0], 1.0), (t.xy[1], seg_peak(k) / 1e6)]
    for line in ax2.get_lines():
        xs, ys, label = line.get_xdata(), line.get_ydata(), line.get_label()
        if label.startswith("chain"):
            pairs += [(y, n_chain / x - 1 + x) for x, y in zip(xs, ys, strict=True)]
        elif "transformer" in label:
            pairs += [(y, seg_peak(int(x)) / inp) for x, y in zip(xs, ys, strict=True)]
        else:  # the vertical line at the chain's optimum, sqrt(64) = 8
            pairs += [(x, math.sqrt(n_chain)) for x in xs]
    r.claim(
        "tradeoff figure: every drawn point and label by hand (largest gap)",
        worst_relative_gap(pairs) + wrong,
        0.0,
        abs_tol=1e-9,
    )


def checkpointing(r: Result) -> None:
    """checkpointing's tables and quantities against block_hand at the stack's shape, the stack's peaks worked by hand
    ((L/k − 1) inputs + k layers while a segment is recomputed) and the chain's (L/k − 1 + k inputs)."""
    q = {k: v.value for k, v in r.quantities.items()}
    get = lambda k: q.get(k, math.nan)  # a missing key fails its claim, it does not raise
    variants = r.tables["variants"]
    L, s, b, h, a, want = _stack(r)
    layer, inp, sel = want["counted"], want["input"], want["selective"]
    share = 4 * s / (24 * h + 4 * s)  # the attention core's 4bs²h of a layer's 24bsh² + 4bs²h matmul FLOPs
    expected = {  # variant -> (saved after forward, peak, extra FLOPs / forward)
        "none": (L * layer, L * layer, 0.0),
        "full": (L * inp, (L - 1) * inp + layer, 1.0),
        "full (torch.utils.checkpoint)": (L * inp, None, 1.0),
        "selective": (L * sel, max(L * sel, (L - 1) * sel + want["before_core"]), share),
    }
    pairs = []
    for row in variants.rows:
        held, peak, extra = expected[row[0]]
        pairs += [(_v(row[1]), held), (_v(row[5]), extra), (_v(row[6]), extra / 3)]
        if peak is not None:
            pairs.append((_v(row[2]), peak))
    pairs += [
        (get("layers"), L),
        (get("layer_bytes"), layer),
        (get("input_bytes"), inp),
        (get("selective_bytes"), sel),
        (get("none_held"), L * layer),
        (get("full_held"), L * inp),
        (get("full_peak"), (L - 1) * inp + layer),
        (get("selective_held"), L * sel),
        (get("layer_over_input"), layer / inp),
        (get("core_flop_share"), share),
        (get("selective_extra_step"), share / 3),
    ]
    r.claim(
        "variants and sizes by hand: layer 34sbh + 5as²b + s² + 4sbk, input 2sbh, selective 34sbh + 4sbk, "
        "extra FLOPs 0, 1, 4s/(24h + 4s)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-12,
    )
    pairs, peaks = [], {}
    for row in r.tables["segments"].rows:
        seg = int(row[0])
        peaks[seg] = (L // seg - 1) * inp + seg * layer
        pairs += [(_v(row[1]), L // seg * inp), (_v(row[2]), peaks[seg]), (_v(row[3]), peaks[seg]), (_v(row[4]), L)]
    n = int(get("chain_layers"))  # the chain's length, an input the page states
    chain = {seg: n // seg - 1 + seg for seg in range(1, n + 1) if n % seg == 0}  # in layer inputs
    best = min(chain, key=chain.get)
    pairs += [
        (get("stack_best_segment"), min(peaks, key=peaks.get)),
        (get("chain_best_segment"), best),
        (get("chain_best_peak_units"), chain[best]),
        (get("chain_none_peak_units"), n),
    ]
    r.claim(
        "segments: held L/k inputs, peak (L/k - 1) inputs + k layers; chain: L/k - 1 + k, best k = 8 holding 15",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-12,
    )


# ---------------------------------------------------------------- the loss table's bytes per logit (memory_buffers)
LOSS_QUOTES = {  # row -> (source key, patterns of the totals its detail prints: forward, backward)
    "loss-eager": ("cross-entropy-ops", r"saves its fp32 output \((\d+) B\)", r"of the logits \(\d+ B\): (\d+) B"),
    "loss-hf": ("cross-entropy-ops", r"(\d+) B after forward, \d+ B at", r"after forward, (\d+) B at the loss"),
    "loss-fused": ("cross-entropy-ops", r"saves the fp32 softmax \((\d+) B\)", None),
    "loss-chunked": (
        "torchtune-chunked-ce",
        r"bf16 chunk, not an fp32 log-softmax\): (\d+) B",
        r": ([\d.]+) B per logit at",
    ),
}


def loss_rows(r: Result) -> None:
    """The loss table's typed bytes per logit (memory_buffers.toml) against the tensors alive worked by hand (bf16 2 B,
    fp32 4 B) and against the totals each source's sentence prints, apart from the typed fields."""
    from distlab.core.facts import source

    bf16, fp32 = 2, 4
    chunks = _quoted_int("memory_buffers", "torchtune-chunked-ce", r"num_output_chunks = (\d+)")
    hand = {  # (after forward, at the loss's backward)
        "loss-eager": (fp32, fp32 + fp32 + fp32),  # log-softmax output; + its gradient and the logits' (fp32)
        "loss-hf": (bf16 + fp32 + fp32, bf16 + fp32 + 3 * fp32),  # bf16 logits and their upcast kept as well
        "loss-fused": (fp32, fp32 + bf16),  # the softmax, the gradient written in place, then cast to bf16
        "loss-chunked": (bf16, bf16 + bf16 / chunks),  # each chunk's bf16 logits; the chunk in flight holds both
    }
    wrong = int(value("memory_buffers.loss-chunked.chunks") != chunks)
    for row, (fwd, bwd) in hand.items():
        typed = (
            value(f"memory_buffers.{row}.forward_bytes_per_logit"),
            value(f"memory_buffers.{row}.backward_bytes_per_logit"),
        )
        wrong += typed != (fwd, bwd)
        key, *patterns = LOSS_QUOTES[row]
        detail = source("memory_buffers", key).detail
        for got, pattern in zip(typed, patterns, strict=True):
            wrong += pattern is not None and float(re.search(pattern, detail).group(1)) != got
    r.claim("loss table: bytes per logit = tensors by hand (bf16 2, fp32 4) = their sources' totals", wrong, 0)
