"""Context parallelism: ring attention over R ranks with online softmax (Liu et al. 2023, Ring
Attention, https://arxiv.org/abs/2310.01889), causal included, simulated rank by rank in one process.

Each rank keeps the queries of its share of the sequence and passes its key/value block around the
ring; after R - 1 hops every query has seen every key, and the online softmax (Milakov & Gimelshein
2018) merges the partial results exactly. With a causal mask a contiguous split leaves rank 0 almost
idle and rank R-1 doing most of the work; splitting the sequence into 2R chunks and giving rank r
chunks r and 2R-1-r (the "zigzag" order of Megatron's context parallelism) gives every rank the same
work.
"""

from __future__ import annotations

import functools
import math

import torch

from distlab.core.experiments import experiment
from distlab.core.facts import value
from distlab.core.results import Result
from distlab.model_parallel.cp_choice import ring_bytes_per_rank

ORDERS = ("contiguous", "zigzag")


def attention_reference(q, k, v, causal: bool = True) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d) + mask) V, the plain way. q, k, v: (B, H, N, D)."""
    n = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, N, N)
    if causal:
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def chunks_of_rank(rank: int, ranks: int, order: str) -> list[int]:
    """Which of the sequence's chunks a rank holds: contiguous (R chunks, rank r holds chunk r) or
    zigzag (2R chunks, rank r holds r and 2R-1-r)."""
    if order == "contiguous":
        return [rank]
    if order == "zigzag":
        return [rank, 2 * ranks - 1 - rank]
    raise ValueError(f"order must be one of {', '.join(ORDERS)}, not {order!r}")


def ring_attention(q, k, v, ranks: int, *, causal: bool = True, order: str = "zigzag"):
    """Ring attention simulated over `ranks`: returns (output in sequence order, stats). Differentiable
    (autograd runs through the ring). stats: per rank the bytes it sent and the score entries it computed."""
    b, heads, n, d = q.shape
    n_chunks = ranks * (2 if order == "zigzag" else 1)
    if n % n_chunks:
        raise ValueError(f"sequence {n} must be divisible by {n_chunks} chunks ({order}, {ranks} ranks)")
    c = n // n_chunks
    span = lambda i: slice(i * c, (i + 1) * c)  # token range of chunk i
    held = [chunks_of_rank(r, ranks, order) for r in range(ranks)]
    kv = [
        (torch.cat([k[:, :, span(i)] for i in held[r]], 2), torch.cat([v[:, :, span(i)] for i in held[r]], 2), held[r])
        for r in range(ranks)
    ]  # what each rank starts with: its own key/value block
    sent = [0] * ranks
    work = [0] * ranks  # score entries computed (a diagonal block is computed in full, then masked)
    pairs = [0] * ranks  # (query, key) pairs that are not masked
    out = torch.empty_like(q)
    scale = 1 / math.sqrt(d)
    state = {}  # (rank, query chunk) -> running max m, running sum l, accumulator acc
    for step in range(ranks):
        for r in range(ranks):
            k_blk, v_blk, kv_chunks = kv[(r - step) % ranks]  # the block that has reached rank r at this step
            for qi, qc in enumerate(held[r]):
                q_blk = q[:, :, span(qc)]  # (B, H, c, D)
                for ki, kc in enumerate(kv_chunks):
                    if causal and kc > qc:
                        continue  # entirely in the future: skipped, no work
                    s = (q_blk @ k_blk[:, :, ki * c : (ki + 1) * c].transpose(-2, -1)) * scale  # (B, H, c, c)
                    if causal and kc == qc:
                        s = s.masked_fill(torch.ones(c, c, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
                    work[r] += c * c * b * heads
                    pairs[r] += (c * (c + 1) // 2 if causal and kc == qc else c * c) * b * heads
                    _online_softmax_update(state, (r, qi), s, v_blk[:, :, ki * c : (ki + 1) * c])
        for r in range(ranks):  # pass the block on: everything but the last step sends
            if step < ranks - 1:
                k_blk, v_blk, _ = kv[(r - step) % ranks]
                sent[r] += (k_blk.numel() + v_blk.numel()) * k_blk.element_size()
    for r in range(ranks):
        for qi, qc in enumerate(held[r]):
            _, denom, acc = state[(r, qi)]
            out[:, :, span(qc)] = acc / denom
    return out, {"bytes_sent": sent, "score_entries": work, "unmasked_pairs": pairs}


def _online_softmax_update(state: dict, key, s: torch.Tensor, v_blk: torch.Tensor) -> None:
    """Merge one block of scores into the running (max m, sum l, accumulator acc) of a query block."""
    m_blk = s.amax(dim=-1, keepdim=True)  # (B, H, c, 1); finite: every row sees at least one key here
    if key not in state:
        p = torch.exp(s - m_blk)
        state[key] = (m_blk, p.sum(-1, keepdim=True), p @ v_blk)
        return
    m, denom, acc = state[key]
    m_new = torch.maximum(m, m_blk)
    p = torch.exp(s - m_new)
    correction = torch.exp(m - m_new)  # rescales what was summed under the old maximum
    state[key] = (m_new, denom * correction + p.sum(-1, keepdim=True), acc * correction + p @ v_blk)


forward_bytes_per_rank = ring_bytes_per_rank  # the formula lives with the other options' in cp_choice


def causal_imbalance(ranks: int, order: str, chunk: int) -> float:
    """Most loaded rank's unmasked (query, key) pairs over the mean, in closed form. A chunk pair
    (qc, kc) contributes chunk^2 when kc < qc and chunk(chunk+1)/2 when kc == qc."""
    n_chunks = ranks * (2 if order == "zigzag" else 1)
    per_rank = [
        sum(qc * chunk * chunk + chunk * (chunk + 1) // 2 for qc in chunks_of_rank(r, ranks, order))
        for r in range(ranks)
    ]
    total = n_chunks * (n_chunks - 1) // 2 * chunk * chunk + n_chunks * chunk * (chunk + 1) // 2
    return max(per_rank) / (total / ranks)


# ---------------------------------------------------------------- the experiment
SHAPE = dict(batch=2, heads=3, seq=96, head_dim=20)  # seq 96 = 8 zigzag chunks of 12 for R = 4; head dim 20
RANKS = (2, 4, 3)


def _inputs(dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    shape = (SHAPE["batch"], SHAPE["heads"], SHAPE["seq"], SHAPE["head_dim"])
    return [torch.randn(shape, generator=g, dtype=torch.float64).to(dtype) for _ in range(4)]  # q, k, v, dout


def _grads(fn, q, k, v, dout):
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    out = fn(q, k, v)
    out = out[0] if isinstance(out, tuple) else out
    out.backward(dout)
    return out.detach(), [x.grad for x in (q, k, v)]


@experiment(
    "context-parallel",
    "ring attention with online softmax over R ranks (causal, zigzag order) "
    "against float64 full attention; bytes per rank; causal load balance",
    kind="simulated",
)
def context_parallel(device: str) -> Result:
    r = Result("context-parallel")
    dev = torch.device("cuda" if device == "cuda" else "cpu")
    q64, k64, v64, d64 = (x.to(dev) for x in _inputs(torch.float64))
    ref_out, ref_grads = _grads(lambda *a: attention_reference(*a, causal=True), q64, k64, v64, d64)
    plain32, plain32_grads = _grads(
        lambda *a: attention_reference(*a, causal=True), *(x.float() for x in (q64, k64, v64, d64))
    )
    plain_err = (plain32.double() - ref_out).abs().max().item()
    plain_grad_err = max((g.double() - rg).abs().max().item() for g, rg in zip(plain32_grads, ref_grads))
    rows = []
    for ranks in RANKS:
        for causal, order in ((True, "zigzag"), (True, "contiguous"), (False, "contiguous")):
            if SHAPE["seq"] % (ranks * (2 if order == "zigzag" else 1)):
                continue
            fn = functools.partial(ring_attention, ranks=ranks, causal=causal, order=order)
            want = ref_out if causal else attention_reference(q64, k64, v64, causal=False)
            out64 = ring_attention(q64, k64, v64, ranks, causal=causal, order=order)[0]
            err64 = (out64 - want).abs().max().item()
            label = f"R={ranks}, {'causal ' + order if causal else 'full'}"
            r.claim(
                f"{label}: float64 ring equals full attention",
                err64,
                0.0,
                abs_tol=1e-12,
                formula="online softmax is exact up to rounding",
            )
            out32, grads32 = _grads(fn, *(x.float() for x in (q64, k64, v64, d64)))
            _, stats = ring_attention(q64.float(), k64.float(), v64.float(), ranks, causal=causal, order=order)
            if causal:
                err32 = (out32.double() - ref_out).abs().max().item()
                gerr32 = max((g.double() - rg).abs().max().item() for g, rg in zip(grads32, ref_grads))
                r.claim(
                    f"{label}: float32 output vs float64 reference",
                    err32,
                    2 * plain_err + 2**-23,
                    relation="<=",
                    formula="<= 2 x plain float32 attention's error + 1 ulp",
                )
                r.claim(
                    f"{label}: float32 gradients (autograd through the ring) vs float64",
                    gerr32,
                    2 * plain_grad_err + 2**-23,
                    relation="<=",
                )
                chunk = SHAPE["seq"] // (ranks * (2 if order == "zigzag" else 1))
                imbalance = max(stats["unmasked_pairs"]) / (sum(stats["unmasked_pairs"]) / ranks)
                r.claim(
                    f"{label}: most loaded rank / mean, unmasked (query, key) pairs",
                    imbalance,
                    causal_imbalance(ranks, order, chunk),
                    rel_tol=1e-12,
                    formula="1 for zigzag; ((R-1)c^2 + c(c+1)/2) / (N(N+1)/2R) for contiguous",
                )
                blocks = max(stats["score_entries"]) / (sum(stats["score_entries"]) / ranks)
                per_rank = [sum(qc + 1 for qc in chunks_of_rank(q, ranks, order)) for q in range(ranks)]
                r.claim(
                    f"{label}: most loaded / mean, blocks computed = chunk pairs at or below the diagonal, by hand",
                    blocks,
                    max(per_rank) / (sum(per_rank) / ranks),
                    rel_tol=1e-12,
                    formula="query chunk i meets keys 0..i: i + 1 blocks, summed over a rank's chunks",
                )
                rows.append([ranks, order, err64, err32, imbalance, blocks])
            kv_width = SHAPE["heads"] * SHAPE["head_dim"]
            expected = forward_bytes_per_rank(SHAPE["seq"], ranks, kv_width, 4) * SHAPE["batch"]
            r.claim(
                f"{label}: bytes each rank sends",
                max(stats["bytes_sent"]),
                expected,
                unit="B",
                formula="(R-1) x 2 x (N/R) x H x D x 4 bytes x B",
            )
    r.table(
        "ring",
        [
            "R",
            "order",
            "float64 ring vs reference",
            "float32 ring vs float64",
            "most loaded / mean (unmasked pairs)",
            "most loaded / mean (blocks computed)",
        ],
        rows,
        caption=f"Causal attention, B={SHAPE['batch']}, H={SHAPE['heads']}, N={SHAPE['seq']}, "
        f"D={SHAPE['head_dim']}; plain float32 attention's own error is {plain_err:.2e}.",
    )
    r.add("plain_fp32_error", plain_err, "", "plain float32 attention vs float64")
    r.claim(
        "plain float32 attention vs float64: within float32 rounding",
        plain_err,
        2**-16,
        relation="<=",
        formula="2^-24 per operation x a few hundred operations per output at N = 96",
    )
    _long_context(r)
    return r


def _long_context(r: Result, seq: int = 131072, ranks: int = 8) -> None:
    """A Llama 2 70B layer (64 query heads, 8 key/value heads of 128) at 128k tokens over 8 ranks: the
    bytes each rank forwards, and the shortest per-rank sequence whose attention hides the transfer."""
    from distlab.models.shapes import preset

    m = preset("70B")
    kv_width = m.kv * m.head_dim
    fwd = forward_bytes_per_rank(seq, ranks, kv_width, 2)
    r.add("long_seq", seq, "tokens", "sequence length")
    r.add("long_ranks", ranks, "", "context-parallel ranks")
    r.add("long_kv_width", kv_width, "", "key/value width (kv heads x head dim)")
    r.add("long_forward_bytes", fwd, "B", "bytes each rank forwards per layer, forward pass, bf16")
    r.add("long_backward_bytes", 2 * fwd, "B", "backward: keys/values travel again, and dK/dV with them")
    flops = value("gpus.H100-SXM.bf16_dense_tflops") * 1e12
    from distlab.hardware.links import per_direction_bytes_per_s

    link = per_direction_bytes_per_s("InfiniBand-NDR")
    # per hop, c = tokens per rank: attention of c queries on c keys costs 2 c^2 h (Q K^T) + 2 c^2 h (P V)
    # FLOPs; the transfer is K and V, 2 c kv_width x 2 bytes. Hidden when 4 c^2 h / F >= 4 c kv_width / B,
    # i.e. c >= F kv_width / (B h). A causal mask skips half the pairs: twice the tokens.
    c_min = flops * kv_width / (link * m.hidden)
    r.add(
        "overlap_tokens_per_rank",
        c_min,
        "tokens",
        "tokens per rank above which one hop's attention hides its "
        "transfer over one InfiniBand NDR port (no mask, peak FLOP/s)",
    )
    r.add("overlap_tokens_per_rank_causal", 2 * c_min, "tokens", "the same with a causal mask (half the pairs)")
    r.add("long_tokens_per_rank", seq // ranks, "tokens", "tokens per rank at 128k over 8 ranks")
    from distlab.hardware.gpus import data_claims

    data_claims(r, ["H100-SXM"])  # its peak sets the overlap threshold
    hops, block = ranks - 1, seq // ranks
    r.claim(
        "bytes a rank forwards = (R - 1) hops x K and V of its block, by hand",
        fwd,
        hops * block * kv_width * 2 * 2,
        unit="B",
        formula="7 x 16,384 tokens x 1,024 x (K, V) x 2 B",
    )
    hop_flops_s = 4 * c_min**2 * m.hidden / flops  # one unmasked hop's attention at the threshold, timed
    hop_bytes_s = 2 * c_min * kv_width * 2 / link  # its K and V over the link
    r.claim(
        "at the overlap threshold one hop's attention takes exactly as long as its transfer",
        hop_flops_s,
        hop_bytes_s,
        rel_tol=1e-12,
        unit="s",
        formula="4 c^2 h / F = 2 c kv x 2 B / link",
    )
    c_causal = r.quantities["overlap_tokens_per_rank_causal"].value
    r.claim(
        "at the causal threshold one hop's masked attention (half the pairs) takes as long as its transfer",
        2 * c_causal**2 * m.hidden / flops,
        2 * c_causal * kv_width * 2 / link,
        rel_tol=1e-12,
        unit="s",
        formula="2 c^2 h / F (half of 4 c^2 h) = 2 c kv x 2 B / link, at the causal c shown",
    )
    r.claim(
        "backward bytes = 2 x (R - 1) hops x K and V of a block, by hand (K, V again, with dK, dV)",
        r.quantities["long_backward_bytes"].value,
        2 * hops * block * kv_width * 2 * 2,
        unit="B",
    )
    r.claim(
        "causal overlap threshold = 2 F kv / (B h) from the datasheets, by hand",
        c_causal,
        2
        * value("gpus.H100-SXM.bf16_dense_tflops")
        * 1e12
        * kv_width
        / (value("interconnect.InfiniBand-NDR.gbits_per_s_per_direction") * 1e9 / 8 * m.hidden),
        rel_tol=1e-12,
        unit="tokens",
        formula="2 x 989 TFLOP/s x 1,024 / (50 GB/s x 8,192)",
    )
    r.claim(
        "tokens per rank x ranks = the sequence",
        r.quantities["long_tokens_per_rank"].value * ranks,
        seq,
        unit="tokens",
    )
    r.claim(
        "key/value width = KV heads x (hidden / heads), from the model card",
        kv_width,
        value("models.70B.kv_heads") * value("models.70B.hidden") / value("models.70B.heads"),
        formula="8 x 8,192 / 64 = 1,024",
    )
