"""Sequence packing with document masks: several examples concatenated into one training window, each attending
only to itself (a block-diagonal causal mask, FlashAttention's varlen / cu_seqlens API, or FlexAttention's
document mask_mod), checked against attending to each document alone in float64; and what padding wastes instead,
counted on example lengths drawn around published SFT means.

Three ways to batch variable-length examples into windows of s tokens:
- pad each example to s (one example per row): every pad token costs a full token of compute;
- pad to the longest example of each batch (dynamic padding): less waste, the batch's longest sets the cost;
- pack: concatenate examples into s-token windows (greedy first fit, no example split), pad only the window's tail.
Attention work counts query-key pairs: a causal row of l tokens attends l(l+1)/2 pairs; a packed window with a
document mask only the sum over its documents, without one the whole window's s(s+1)/2, across documents.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch.nn import functional as F

from distlab.attention import packing_checks
from distlab.core.experiments import experiment
from distlab.core.facts import entries, value
from distlab.core.results import Quantity, Result
from distlab.models.shapes import preset
from distlab.runtime.threads import single_threaded

LENGTH_SIGMA = 0.8  # spread of log(length) around each source's mean: a modelling choice, not a published figure
EXAMPLES = 4000
BATCH = 8  # examples per batch for dynamic padding


# ---------------------------------------------------------------- attention with a document mask
def naive_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(QKᵀ/√d + causal) V written out: (H, l, d) -> (H, l, d). The per-document reference."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    causal = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    return scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v


def document_ids(lengths: list[int], window: int) -> torch.Tensor:
    """Token -> document index for a window packed with `lengths`; padding is document -1."""
    ids = torch.full((window,), -1, dtype=torch.long)
    start = 0
    for i, n in enumerate(lengths):
        ids[start : start + n] = i
        start += n
    return ids


def document_mask(doc: torch.Tensor) -> torch.Tensor:
    """Block-diagonal causal mask (S, S): query i sees key j when both are in the same document and j <= i.
    Padding rows see only themselves (so their softmax is defined; their outputs are discarded)."""
    s = doc.shape[0]
    same = (doc[:, None] == doc[None, :]) & (doc[:, None] >= 0)
    return (same & torch.ones(s, s, dtype=torch.bool, device=doc.device).tril()) | torch.eye(
        s, dtype=torch.bool, device=doc.device
    )


def varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: list[int]) -> torch.Tensor:
    """FlashAttention's varlen API in spirit: documents addressed by cumulative offsets, each attended alone."""
    out = torch.zeros_like(q)
    for a, b in zip(cu_seqlens[:-1], cu_seqlens[1:]):
        out[:, a:b] = F.scaled_dot_product_attention(q[:, a:b], k[:, a:b], v[:, a:b], is_causal=True)
    return out


def flex_document(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, doc: torch.Tensor):
    """FlexAttention with a document mask_mod, eager (unfused: torch warns that it materialises the scores; the
    fused kernel needs torch.compile). Returns the output and the block mask's sparsity in %."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    s = q.shape[-2]
    # the mask_mod as a lambda: the guard audit notes every `def`'s calls with a statement that flex_attention's
    # tracing refuses as a side effect, and a lambda holds no statement
    block = create_block_mask(
        lambda b, h, q_idx, kv_idx: (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx) | (q_idx == kv_idx),
        B=None,
        H=None,
        Q_LEN=s,
        KV_LEN=s,
        device=q.device.type,
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile", category=UserWarning)
        out = flex_attention(q[None], k[None], v[None], block_mask=block)[0]
    return out, float(block.sparsity())


# ---------------------------------------------------------------- padding against packing
def example_lengths(window: int, n: int = EXAMPLES, seed: int = 0) -> list[int]:
    """Example lengths (prompt + response) drawn around LIMA's per-source means (Table 1), each source in
    proportion to its examples: log-normal with those means and spread LENGTH_SIGMA, clipped to [8, window]."""
    sources = {k: v for k, v in entries("sft_data").items() if k.startswith("lima-") and "examples" in v}
    sources.pop("lima-total", None)
    names = sorted(sources)
    weights = torch.tensor([sources[k]["examples"] for k in names], dtype=torch.float64)
    means = torch.tensor([sources[k]["input_len_mean"] + sources[k]["output_len_mean"] for k in names])
    g = torch.Generator().manual_seed(seed)
    pick = torch.multinomial(weights, n, replacement=True, generator=g)
    mu = torch.log(means[pick].double()) - LENGTH_SIGMA**2 / 2  # a log-normal with mean exp(mu + sigma^2 / 2)
    lengths = torch.exp(mu + LENGTH_SIGMA * torch.randn(n, generator=g, dtype=torch.float64))
    return [int(x) for x in lengths.round().clamp(8, window)]


def pack(lengths: list[int], window: int) -> list[list[int]]:
    """Greedy first-fit-decreasing into windows of `window` tokens; no example is split."""
    bins: list[list[int]] = []
    room: list[int] = []
    for n in sorted(lengths, reverse=True):
        for i, r in enumerate(room):
            if n <= r:
                bins[i].append(n)
                room[i] -= n
                break
        else:
            bins.append([n])
            room.append(window - n)
    return bins


def training_flops(c: dict[str, int], params: int, layers: int, hidden: int) -> float:
    """Forward + backward FLOPs: 6 per parameter per token (the matmuls), plus attention's 12·L·h per query-key pair
    (QKᵀ and PV, 2h each in forward, three times that with backward)."""
    return 6 * params * c["tokens"] + 12 * layers * hidden * c["pairs"]


def pairs(n: int) -> int:
    """Query-key pairs of causal attention over n tokens."""
    return n * (n + 1) // 2


def schemes(lengths: list[int], window: int, batch: int = BATCH) -> dict[str, dict[str, int]]:
    """Tokens computed and attention pairs computed by each way of batching, with the useful amounts."""
    useful = {"tokens": sum(lengths), "pairs": sum(pairs(n) for n in lengths)}
    bins = pack(lengths, window)
    dynamic_tokens = dynamic_pairs = 0
    for i in range(0, len(lengths), batch):  # lengths in arrival (random) order
        longest = max(lengths[i : i + batch])
        dynamic_tokens += longest * len(lengths[i : i + batch])
        dynamic_pairs += pairs(longest) * len(lengths[i : i + batch])
    return {
        "useful": useful,
        "pad to the window": {"tokens": len(lengths) * window, "pairs": len(lengths) * pairs(window)},
        "pad to the batch's longest": {"tokens": dynamic_tokens, "pairs": dynamic_pairs},
        "packed, causal mask over the window": {"tokens": len(bins) * window, "pairs": len(bins) * pairs(window)},
        "packed, document mask": {"tokens": len(bins) * window, "pairs": useful["pairs"]},
    }


@experiment(
    "packing",
    "packed sequences with per-document causal masks (dense block-diagonal, varlen, FlexAttention) against "
    "per-document attention in float64; tokens and attention work that padding wastes on SFT-like lengths",
)
@single_threaded
def packing(device: str) -> Result:
    r = Result("packing")
    window_small, docs = 128, [37, 50, 29]  # 12 tokens of padding at the end
    heads, d = 3, 24
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(heads, window_small, d, generator=g, dtype=torch.float64).to(device) for _ in range(3))
    doc = document_ids(docs, window_small).to(device)
    ref = torch.zeros_like(q)
    start = 0
    for n in docs:
        ref[:, start : start + n] = naive_causal(
            q[:, start : start + n], k[:, start : start + n], v[:, start : start + n]
        )
        start += n
    real = slice(0, sum(docs))
    cu = [0]
    for n in docs:
        cu.append(cu[-1] + n)
    outs = {
        "dense SDPA, block-diagonal causal mask": F.scaled_dot_product_attention(q, k, v, attn_mask=document_mask(doc)),
        "varlen (cu_seqlens), document by document": varlen(q, k, v, cu),
        "causal mask over the whole window (no document mask)": F.scaled_dot_product_attention(q, k, v, is_causal=True),
    }
    flex, _ = flex_document(q, k, v, doc)
    outs["FlexAttention, document mask_mod (eager)"] = flex
    rows = []
    for name, out in outs.items():
        err = float((out[:, real] - ref[:, real]).abs().max())
        rows.append([name, err])
        if "no document mask" in name:
            r.claim(
                "without a document mask, later documents attend to earlier ones: outputs differ",
                err,
                0.1,
                relation=">=",
            )
        else:
            r.claim(f"{name} = each document alone (float64)", err, 0.0, abs_tol=1e-12)
    r.table(
        "equivalence",
        ["packed attention", "max abs difference from each document alone"],
        rows,
        caption=f"Documents of {', '.join(map(str, docs))} tokens packed into a {window_small}-token window, "
        f"{heads} heads of width {d}, float64; the reference attends to each document alone, written out",
    )

    window = int(value("sft_data.llama2-sft-packing.seq"))
    lengths = example_lengths(window)
    counts = schemes(lengths, window)
    useful = counts.pop("useful")
    model = preset("7B")
    useful_flops = training_flops(useful, model.params(), model.layers, model.hidden)
    table, flop_ratio = [], {}
    for name, c in counts.items():
        flop_ratio[name] = training_flops(c, model.params(), model.layers, model.hidden) / useful_flops
        table.append(
            [
                name,
                Quantity(c["tokens"] / useful["tokens"], "x"),
                Quantity(1 - useful["tokens"] / c["tokens"], "fraction"),
                Quantity(c["pairs"] / useful["pairs"], "x"),
                Quantity(flop_ratio[name], "x"),
            ]
        )
    r.table(
        "waste",
        [
            "batching",
            "tokens computed / useful",
            "tokens wasted",
            "attention pairs computed / useful",
            "training FLOPs / useful (Llama 2 7B)",
        ],
        table,
        caption=f"{len(lengths):,} example lengths drawn around LIMA's per-source means (log-normal, σ = "
        f"{LENGTH_SIGMA}), windows of {window} tokens (Llama 2's SFT sequence), dynamic padding in batches of {BATCH}",
    )
    pad = counts["pad to the window"]
    packed = counts["packed, document mask"]
    for name, c in counts.items():
        lo, hi = sorted((c["tokens"] / useful["tokens"], c["pairs"] / useful["pairs"]))
        r.claim(
            f"{name}: FLOP ratio between its token ratio and its attention-pair ratio (a weighted mean)",
            flop_ratio[name],
            hi,
            relation="<=",
            rel_tol=1e-12,
        )
        r.claim(f"{name}: FLOP ratio at least its smaller ratio", flop_ratio[name], lo, relation=">=", rel_tol=1e-12)
    r.add("pad_flops_ratio", flop_ratio["pad to the window"], "x", "training FLOPs, padding to the window / useful")
    r.add(
        "attention_flops_share",
        12 * model.layers * model.hidden * useful["pairs"] / useful_flops,
        "fraction",
        "attention's share of the useful training FLOPs (Llama 2 7B)",
    )
    r.claim("padding to the window: tokens computed = examples x window", pad["tokens"], len(lengths) * window)
    r.claim("packing computes at least the useful tokens", packed["tokens"], useful["tokens"], relation=">=")
    r.claim(
        "first-fit packing: every window but one more than half full (so waste < 1/2)",
        1 - useful["tokens"] / packed["tokens"],
        0.5,
        relation="<=",
    )
    r.claim(
        "the document mask computes exactly the useful attention pairs (sum of l(l+1)/2)",
        packed["pairs"],
        sum(n * (n + 1) // 2 for n in lengths),
    )
    r.claim(
        "packing wastes fewer tokens than padding to the batch's longest",
        packed["tokens"],
        counts["pad to the batch's longest"]["tokens"],
        relation="<=",
    )
    mean = sum(lengths) / len(lengths)
    r.add("mean_length", mean, "tokens", "mean example length drawn")
    r.add("window", window, "tokens", "training window")
    r.add("pad_waste", 1 - useful["tokens"] / pad["tokens"], "fraction", "tokens wasted padding to the window")
    r.add(
        "dynamic_waste",
        1 - useful["tokens"] / counts["pad to the batch's longest"]["tokens"],
        "fraction",
        "tokens wasted padding to the batch's longest",
    )
    r.add("pack_waste", 1 - useful["tokens"] / packed["tokens"], "fraction", "tokens wasted packing")
    r.add("pad_speedup", pad["tokens"] / packed["tokens"], "x", "token work, padding to the window / packing")
    r.add(
        "nomask_pairs",
        counts["packed, causal mask over the window"]["pairs"] / useful["pairs"],
        "x",
        "attention pairs, packed without a document mask / useful",
    )
    r.claim(
        "padding to the window: the waste is 1 - mean length / window",
        1 - useful["tokens"] / pad["tokens"],
        1 - mean / window,
        rel_tol=1e-9,
    )
    packing_checks.hand_worked(r, schemes)  # the batching worked by hand on four examples
    packing_checks.packing(r)  # every number shown, against relations and second sources
    return r
