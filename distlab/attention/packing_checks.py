"""The packing experiment's page numbers worked apart from distlab.attention.packing: a hand-worked batch of four
examples, the waste table's numbers against the relations it prints, the mean length against the float64 expectation
of the clipped log-normal mixture, Llama 2's SFT sequence and LIMA's totals from their sources' sentences, and Llama
2 7B's shape from its released config.json.

Each function compares what the packing experiment put in its Result with these references, as claims.
"""

from __future__ import annotations

import math
import re

from distlab.core.facts import entries, source
from distlab.core.results import Result, worst_relative_gap

# Llama 2 7B's released config.json (meta-llama/Llama-2-7b-hf): num_hidden_layers, hidden_size
LLAMA2_7B = {"layers": 32, "hidden": 4096}


def _quoted(data: str, key: str, pattern: str) -> float:
    return float(re.search(pattern, source(data, key).detail).group(1).replace(",", ""))


def hand_worked(r: Result, schemes) -> None:
    """Lengths 3, 5, 2, 7 in windows of 8, batches of 2, worked by hand: useful 17 tokens and 3·4/2 + 5·6/2 + 2·3/2 +
    7·8/2 = 6 + 15 + 3 + 28 = 52 pairs; padded to the window 4 x 8 = 32 tokens, 4 x 36 = 144 pairs; to the batch's
    longest (3, 5 -> 5; 2, 7 -> 7) 2·5 + 2·7 = 24 tokens, 2·15 + 2·28 = 86 pairs; first fit decreasing packs [7],
    [5, 3], [2]: 3 windows, 24 tokens, 3 x 36 = 108 pairs without a document mask, the useful 52 with one."""
    want = {
        "useful": (17, 52),
        "pad to the window": (32, 144),
        "pad to the batch's longest": (24, 86),
        "packed, causal mask over the window": (24, 108),
        "packed, document mask": (24, 52),
    }
    got = schemes([3, 5, 2, 7], 8, 2)
    wrong = sum((got.get(k, {}).get("tokens"), got.get(k, {}).get("pairs")) != v for k, v in want.items())
    r.claim("batching 3, 5, 2, 7 in windows of 8, batches of 2: tokens and pairs as worked by hand", wrong, 0)


def lima_mean(window: int, sigma: float) -> float:
    """Expected example length: LIMA's sources weighted by their examples, each log-normal with its printed mean
    m = in + out and spread sigma (mu = ln m - sigma²/2), clipped at the window: m Φ((ln W - mu - σ²)/σ) + W P(X > W)
    (the clip at 8 tokens and the rounding move it by far less than the sampling error)."""
    phi = lambda z: 0.5 * (1 + math.erf(z / math.sqrt(2)))
    num = den = 0.0
    for key, row in entries("sft_data").items():
        if not key.startswith("lima-") or key == "lima-total" or "examples" not in row:
            continue
        m, w = row["input_len_mean"] + row["output_len_mean"], row["examples"]
        mu = math.log(m) - sigma**2 / 2
        num += w * (
            m * phi((math.log(window) - mu - sigma**2) / sigma) + window * (1 - phi((math.log(window) - mu) / sigma))
        )
        den += w
    return num / den


def packing(r: Result) -> None:
    """Every number of the packing section against the references above."""
    from distlab.models.shapes import published_params

    q = {k: v.value for k, v in r.quantities.items()}
    get = lambda k: q.get(k, math.nan)  # a missing key fails its claim, it does not raise
    table = r.tables["waste"]
    sigma = float(re.search(r"σ = ([\d.]+)", table.caption).group(1))  # a modelling choice the caption prints
    seq = _quoted("sft_data", "llama2-sft-packing", r"sequence length (?:of )?(\d+)")  # "... of 4096 tokens" too
    r.claim("window = Llama 2's SFT sequence length as Section 3.1 prints it", get("window"), seq)
    # LIMA's rows against Section 2's totals: exactly 1,000 sequences, roughly 750,000 tokens
    rows = [
        v for k, v in entries("sft_data").items() if k.startswith("lima-") and k != "lima-total" and "examples" in v
    ]
    total = _quoted("sft_data", "lima-table1", r"roughly ([\d,]+) tokens")
    r.claim(
        "LIMA's sources sum to Section 2's exactly 1,000 sequences",
        sum(v["examples"] for v in rows),
        _quoted("sft_data", "lima-table1", r"exactly ([\d,]+) sequences"),
    )
    r.claim(
        "LIMA's examples x (input + output) means: Section 2's roughly 750,000 tokens",
        sum(v["examples"] * (v["input_len_mean"] + v["output_len_mean"]) for v in rows),
        total,
        rel_tol=0.02,
        formula="'roughly': 759,800 from the table's rounded means",
    )
    r.claim(
        "mean length drawn = the clipped log-normal mixture's expectation (4,000 draws: sampling error about 1.4 %)",
        get("mean_length"),
        lima_mean(int(seq), sigma),
        rel_tol=0.05,
        unit="tokens",
    )
    # the table: ratios to the useful work; A = attention's share of the useful FLOPs from the pad row by hand
    cells = {
        row[0]: [float(getattr(c, "value", c)) for c in row[1:]] for row in table.rows
    }  # tokens, wasted, pairs, FLOPs
    pad, packed = cells["pad to the window"], cells["packed, document mask"]
    nomask = cells["packed, causal mask over the window"]
    w = get("window")
    pairs_per_token = (w + 1) / 2 * pad[0] / pad[2]  # useful pairs / useful tokens: pad = N·W(W+1)/2 and N·W over them
    attn = 12 * LLAMA2_7B["layers"] * LLAMA2_7B["hidden"] * pairs_per_token  # QKᵀ and PV, forward and backward
    share = attn / (6 * published_params("7B") + attn)  # 6Ψ per token for the matmuls
    pairs = [(get("attention_flops_share"), share), (pad[0], w / get("mean_length")), (packed[2], 1.0)]
    pairs += [(nomask[2], pad[2] * packed[0] / pad[0]), (nomask[0], packed[0])]
    low = 0
    for tokens, wasted, pair_ratio, flops in cells.values():
        pairs += [(wasted, 1 - 1 / tokens), (flops, (1 - share) * tokens + share * pair_ratio)]
        low += tokens < 1 or pair_ratio < 1
    r.claim(
        "waste table: wasted = 1 - 1/tokens; FLOPs = (1 - A) tokens + A pairs, A by hand from the pad row and "
        "Llama 2 7B; pad tokens = W / mean; no-mask pairs = pad pairs x packed/pad tokens; document mask 1",
        worst_relative_gap(pairs) + low,
        0.0,
        abs_tol=1e-9,
    )
    r.claim(
        "the page's wastes, speed-up, FLOP ratio and no-mask pairs = the table's cells",
        worst_relative_gap(
            [
                (get("pad_waste"), pad[1]),
                (get("dynamic_waste"), cells["pad to the batch's longest"][1]),
                (get("pack_waste"), packed[1]),
                (get("pad_speedup"), pad[0] / packed[0]),
                (get("pad_flops_ratio"), pad[3]),
                (get("nomask_pairs"), nomask[2]),
            ]
        ),
        0.0,
        abs_tol=1e-12,
    )
