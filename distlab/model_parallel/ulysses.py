"""Ulysses and all-gather-KV context parallelism simulated rank by rank in one process, beside the ring
(distlab/model_parallel/context_parallel.py), against float64 full attention; their bytes against the formulas
of distlab/model_parallel/cp_choice.py, and the choice between the three for real layers.

Ulysses (Jacobs et al. 2023, https://arxiv.org/abs/2309.14509): rank r starts with its s/c tokens and every
head; an all-to-all sends rank j the heads of group j for those tokens, so rank j ends with every token of its
h/c query heads (and the key/value heads they use); attention runs unsplit; a second all-to-all sends each
rank its tokens back. All-gather KV (Llama 3, https://arxiv.org/abs/2407.21783, Section 3.3.2): every rank
gathers all keys and values, then attends its own zigzag chunks of queries.
"""

from __future__ import annotations

import math

import torch

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.model_parallel.context_parallel import chunks_of_rank
from distlab.model_parallel.cp_choice import (
    SLACK,
    allgather_kv_bytes_per_rank,
    choose_context_parallel,
    context_parallel_options,
    ulysses_bytes_per_rank,
    ulysses_feasible,
)


def gqa_attention(q, k, v, causal: bool = True, q_offset: int = 0) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d) + mask) V with g key/value heads shared by h/g query heads each.
    q: (B, h, Nq, D), k, v: (B, g, Nk, D); query i sits at position q_offset + i of the key sequence."""
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)  # (B, h, Nk, D)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, h, Nq, Nk)
    if causal:
        pos_q = torch.arange(q.shape[2], device=q.device)[:, None] + q_offset
        pos_k = torch.arange(k.shape[2], device=q.device)[None, :]
        scores = scores.masked_fill(pos_k > pos_q, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def ulysses_attention(q, k, v, ranks: int, causal: bool = True):
    """Ulysses over `ranks`, rank by rank: returns (output in sequence order, bytes each rank sent).
    q: (B, h, N, D); k, v: (B, g, N, D). With c > g, rank j receives the key/value head its query heads use."""
    b, h, n, d = q.shape
    g = k.shape[1]
    if n % ranks or not ulysses_feasible(ranks, h, g):
        raise ValueError(f"ulysses: {ranks} ranks must divide the sequence {n} and the heads {h} (kv heads {g})")
    tok = n // ranks
    hq = h // ranks  # query heads per rank after the all-to-all
    held = [slice(r * tok, (r + 1) * tok) for r in range(ranks)]  # rank r's tokens before and after

    def kv_heads_of(j: int) -> slice:  # the key/value heads rank j's query heads use
        first, last = j * hq * g // h, ((j + 1) * hq - 1) * g // h
        return slice(first, last + 1)

    sent = [0] * ranks
    out_heads = []
    for j in range(ranks):  # all-to-all 1: rank j gathers its heads from every rank's tokens
        parts_q = [q[:, j * hq : (j + 1) * hq, held[r]] for r in range(ranks)]  # (B, h/c, N/c, D) each
        parts_k = [k[:, kv_heads_of(j), held[r]] for r in range(ranks)]
        parts_v = [v[:, kv_heads_of(j), held[r]] for r in range(ranks)]
        for r in range(ranks):
            if r != j:
                sent[r] += sum(x[r].numel() for x in (parts_q, parts_k, parts_v)) * q.element_size()
        qj, kj, vj = (torch.cat(x, dim=2) for x in (parts_q, parts_k, parts_v))  # every token, heads of j
        out_heads.append(gqa_attention(qj, kj, vj, causal))  # (B, h/c, N, D)
    out = torch.empty_like(q)
    for r in range(ranks):  # all-to-all 2: rank r gathers every head of its own tokens
        for j in range(ranks):
            piece = out_heads[j][:, :, held[r]]
            out[:, j * hq : (j + 1) * hq, held[r]] = piece
            if r != j:
                sent[j] += piece.numel() * q.element_size()
    return out, sent


def allgather_kv_attention(q, k, v, ranks: int, causal: bool = True):
    """All-gather-KV context parallelism over `ranks` with the zigzag split: returns (output, bytes each rank
    sent in a ring all-gather of K and V). Each query chunk attends only the keys up to its own end."""
    b, h, n, d = q.shape
    if n % (2 * ranks):
        raise ValueError(f"allgather-kv: sequence {n} must be divisible by {2 * ranks} zigzag chunks")
    c = n // (2 * ranks)
    held = [chunks_of_rank(r, ranks, "zigzag") for r in range(ranks)]
    own_kv = [
        (
            torch.cat([k[:, :, i * c : (i + 1) * c] for i in held[r]], 2),
            torch.cat([v[:, :, i * c : (i + 1) * c] for i in held[r]], 2),
        )
        for r in range(ranks)
    ]
    sent = [(ranks - 1) * (kr.numel() + vr.numel()) * k.element_size() for kr, vr in own_kv]  # ring all-gather
    chunk_k, chunk_v = {}, {}  # the gathered sequence, rebuilt in token order from every rank's chunks
    for r, (kr, vr) in enumerate(own_kv):
        for slot, i in enumerate(held[r]):
            chunk_k[i], chunk_v[i] = kr[:, :, slot * c : (slot + 1) * c], vr[:, :, slot * c : (slot + 1) * c]
    k_all = torch.cat([chunk_k[i] for i in range(2 * ranks)], 2)
    v_all = torch.cat([chunk_v[i] for i in range(2 * ranks)], 2)
    out = torch.empty_like(q)
    for r in range(ranks):
        for i in held[r]:
            end = (i + 1) * c if causal else n  # keys past the chunk's end are all masked: not computed
            out[:, :, i * c : (i + 1) * c] = gqa_attention(
                q[:, :, i * c : (i + 1) * c], k_all[:, :, :end], v_all[:, :, :end], causal, q_offset=i * c
            )
    return out, sent


# ---------------------------------------------------------------- the experiment
SHAPE = dict(batch=2, heads=8, kv_heads=4, seq=96, head_dim=12)  # seq 96: 2c zigzag chunks for c = 2, 3, 4, 8
RANKS = (2, 4, 3, 8)  # c = 8 > g = 4: Ulysses copies key/value heads; c = 3 does not divide the heads


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    b, h, kv, n, d = (SHAPE[k] for k in ("batch", "heads", "kv_heads", "seq", "head_dim"))
    return (
        torch.randn(b, h, n, d, generator=g, dtype=torch.float64),
        torch.randn(b, kv, n, d, generator=g, dtype=torch.float64),
        torch.randn(b, kv, n, d, generator=g, dtype=torch.float64),
    )


LAYERS = {  # (query heads, key/value heads, head dim): a GQA layer and an MHA one
    "Llama 2 70B (GQA)": (64, 8, 128),
    "MHA, 32 heads of 128": (32, 32, 128),
}


@experiment(
    "ulysses-attention",
    "Ulysses (all-to-all over heads) and all-gather-KV context parallelism simulated rank by rank against float64 "
    "full attention; bytes per rank beside the ring's; which to choose",
    kind="simulated",
)
def ulysses_experiment(device: str) -> Result:
    r = Result("ulysses-attention")
    dev = torch.device("cuda" if device == "cuda" else "cpu")
    q, k, v = (x.to(dev) for x in _inputs())
    b, h, g, n, d = (SHAPE[x] for x in ("batch", "heads", "kv_heads", "seq", "head_dim"))
    want = gqa_attention(q, k, v, causal=True)
    rows = []
    for c in RANKS:
        feasible = ulysses_feasible(c, h, g)
        r.claim(
            f"c={c}: Ulysses feasible iff c divides {h} heads and divides or is a multiple of {g} kv heads",
            feasible,
            h % c == 0 and (g % c == 0 or c % g == 0),
        )
        if feasible:
            out, sent = ulysses_attention(q, k, v, c)
            err = (out - want).abs().max().item()
            r.claim(
                f"c={c}: float64 Ulysses equals full attention",
                err,
                0.0,
                abs_tol=1e-12,
                formula="the same softmax, split by heads: exact up to rounding",
            )
            uly = ulysses_bytes_per_rank(n, c, h, g, d, 8) * b
            r.claim(
                f"c={c}: Ulysses bytes each rank sends (counted) = formula",
                max(sent),
                uly,
                rel_tol=1e-12,
                unit="B",
                formula="(c-1)(s/c) d b (2h/c + 2 max(g/c, 1)) x batch",
            )
            r.claim(f"c={c}: every rank sends the same", min(sent), max(sent), unit="B")
        else:
            err, uly = None, None
        out_ag, sent_ag = allgather_kv_attention(q, k, v, c)
        err_ag = (out_ag - want).abs().max().item()
        r.claim(f"c={c}: float64 all-gather-KV equals full attention", err_ag, 0.0, abs_tol=1e-12)
        ring = (c - 1) * 2 * (n // c) * g * d * 8 * b  # by hand: c-1 hops of K and V of one rank's tokens
        r.claim(
            f"c={c}: all-gather-KV bytes (counted) = the ring's",
            max(sent_ag),
            ring,
            rel_tol=1e-12,
            unit="B",
            formula="(c-1) x 2 (s/c) g d b x batch",
        )
        r.claim(
            f"c={c}: all-gather-KV bytes = formula",
            max(sent_ag),
            allgather_kv_bytes_per_rank(n, c, g * d, 8) * b,
            rel_tol=1e-12,
            unit="B",
        )
        rows.append(
            [
                c,
                "yes" if feasible else "no",
                err if err is not None else "—",
                err_ag,
                max(sent) if feasible else "—",
                max(sent_ag),
            ]
        )
    r.table(
        "simulated",
        [
            "c",
            "Ulysses feasible",
            "Ulysses vs float64 reference",
            "all-gather-KV vs reference",
            "Ulysses bytes / rank",
            "all-gather-KV (= ring) bytes / rank",
        ],
        rows,
        caption=f"Causal attention in float64, B={b}, h={h} query heads, g={g} key/value heads, N={n}, D={d}; "
        "bytes counted as the simulation moves them (8-byte elements).",
    )
    _choices(r)
    return r


def _choices(r: Result, seq: int = 131072) -> None:
    """Bytes and exposed time per layer forward for real layers at 128k tokens, on NVLink and on one IB port."""
    from distlab.core.facts import value
    from distlab.hardware.links import per_direction_bytes_per_s

    flops = value("gpus.H100-SXM.bf16_dense_tflops") * 1e12
    links = {
        "NVLink 4": per_direction_bytes_per_s("NVLink4-H100"),
        "IB NDR": per_direction_bytes_per_s("InfiniBand-NDR"),
    }
    rows = []
    for name, (h, g, d) in LAYERS.items():
        for c in (2, 4, 8, 16):
            for link, bw in links.items():
                opts = {
                    o.option: o
                    for o in context_parallel_options(
                        seq=seq, ranks=c, heads=h, kv_heads=g, head_dim=d, flops_per_s=flops, link_bytes_per_s=bw
                    )
                }
                best = choose_context_parallel(
                    seq=seq, ranks=c, heads=h, kv_heads=g, head_dim=d, flops_per_s=flops, link_bytes_per_s=bw
                )
                ring, uly = opts["ring"], opts["ulysses"]
                # independent by hand: Ulysses beats the ring's bytes exactly when c > 1 + h/g (and c <= g)
                fewer = uly.bytes_per_rank < ring.bytes_per_rank
                by_hand = c > 1 + h / g if c <= g else (c - 1) * (2 * h / c + 2) < (c - 1) * 2 * g
                if link == "NVLink 4":  # bytes do not depend on the link
                    r.claim(f"{name} c={c}: Ulysses sends fewer bytes than the ring iff c > 1 + h/g", fewer, by_hand)
                rows.append(
                    [
                        name,
                        c,
                        link,
                        ring.bytes_per_rank,
                        uly.bytes_per_rank if uly.feasible else "—",
                        ring.exposed_seconds * 1e3,
                        opts["allgather-kv"].exposed_seconds * 1e3,
                        opts["allgather-kv"].exposed_seconds / ring.attention_seconds,
                        uly.exposed_seconds * 1e3 if uly.feasible else "—",
                        best.option,
                    ]
                )
                if link == "NVLink 4" and c == 8:
                    key = "gqa" if g < h else "mha"
                    ratio = uly.bytes_per_rank / ring.bytes_per_rank
                    r.add(f"{key}_c8_ulysses_over_ring", ratio, "", f"{name}, c = 8: Ulysses bytes / ring bytes")
                    r.claim(
                        f"{name} c=8: Ulysses / ring bytes = (h + g)/(c g) by hand",
                        ratio,
                        (h + g) / (c * g),
                        rel_tol=1e-12,
                        formula="(2h/c + 2g/c) / 2g, c <= g",
                    )
                    r.add(f"{key}_c8_ring_bytes", ring.bytes_per_rank, "B", f"{name}, c = 8: ring bytes per GPU")
                    r.claim(
                        f"{name} c=8: ring bytes by hand",
                        ring.bytes_per_rank,
                        7 * 2 * seq / 8 * g * d * 2,
                        rel_tol=1e-12,
                        unit="B",
                        formula="(c-1) 2 (s/c) g d x 2 B",
                    )
                    share = opts["allgather-kv"].exposed_seconds / ring.attention_seconds
                    r.add(
                        f"{key}_c8_allgather_share",
                        share,
                        "fraction",
                        f"{name}, c = 8, NVLink: exposed all-gather / attention time",
                    )
                    r.claim(
                        f"{name} c=8: all-gather share of attention = (c-1) g b F / (s h B) by hand",
                        share,
                        (c - 1) * g * 2 * flops / (seq * h * bw),
                        rel_tol=1e-12,
                    )
                    r.add(
                        f"{key}_c8_ulysses_share",
                        uly.exposed_seconds / ring.attention_seconds,
                        "fraction",
                        f"{name}, c = 8, NVLink: Ulysses all-to-alls / attention time",
                    )
                    r.claim(
                        f"{name} c=8: Ulysses share of attention = (c-1) b (2h/c + 2g/c) F / (2 s h B) by hand",
                        uly.exposed_seconds / ring.attention_seconds,
                        (c - 1) * 2 * (2 * h / c + 2 * g / c) * flops / (2 * seq * h * bw),
                        rel_tol=1e-12,
                    )
    r.add("slack", SLACK, "fraction", "the rule's slack: all-gather KV when it exposes at most this share")
    r.table(
        "choice",
        [
            "layer",
            "c",
            "link",
            "ring / all-gather bytes",
            "Ulysses bytes",
            "ring exposed (ms)",
            "all-gather exposed (ms)",
            "all-gather / attention",
            "Ulysses exposed (ms)",
            "chosen",
        ],
        rows,
        caption=f"One layer's forward at {seq:,} tokens, bf16, causal, H100 peak bf16 rate; link at its "
        "one-direction rate (c = 16 on NVLink needs a domain larger than an 8-GPU node). Chosen: all-gather KV "
        f"when its exposed share of the attention time is at most {SLACK:.0%}, else the least exposed. Exposed: "
        "what the attention does not hide (all of an all-to-all or an all-gather; the ring's hops beyond the "
        "attention of the block before). Computed from distlab/model_parallel/cp_choice.py.",
    )
    r.add("choice_seq", seq, "tokens", "sequence length of the choice table")
