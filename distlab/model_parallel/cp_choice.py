"""Three ways to split one sequence over c GPUs, in bytes and seconds, and a rule for choosing (pure Python).

- **Ring** (Liu et al. 2023; the `context-parallel` experiment): queries stay, key/value blocks travel round
  the ring in c - 1 hops, each hop's transfer hidden behind the attention of the block that arrived before.
- **All-gather KV** (Llama 3, https://arxiv.org/abs/2407.21783, Section 3.3.2): every GPU all-gathers the keys
  and values of the whole sequence, then attends its own (zigzag) queries. The same bytes as the ring, in one
  collective that is not hidden behind the attention it feeds; any mask (documents) works unchanged, and with
  grouped-query attention the keys and values are small.
- **Ulysses** (Jacobs et al. 2023, https://arxiv.org/abs/2309.14509): an all-to-all turns "my tokens, all heads"
  into "all tokens, my heads", attention runs unsplit on h/c heads, a second all-to-all turns it back. Its bytes
  per GPU shrink as 1/c, but the split is over heads: c must divide the query heads, and beyond g key/value
  heads each GPU needs a copy of a key/value head it shares with others.

Per layer and forward pass, bytes each GPU sends (b bytes per element, d head dim, g key/value heads, h
query heads, s tokens):

    ring, all-gather KV:  (c-1) x 2 (s/c) g d b                     (constant in c at large c)
    Ulysses:              (c-1) (s/c) d b x (2 h/c + 2 max(g/c, 1))  (queries and output, keys and values)

Ulysses sends less than the ring when c > 1 + h/g (MHA: c > 2); with h/g = 8 (Llama 2/3 70B) never for c <= g.
"""

from __future__ import annotations

from dataclasses import dataclass

OPTIONS = ("ring", "allgather-kv", "ulysses")


def ring_bytes_per_rank(seq: int, ranks: int, kv_width: int, bytes_per_element: int = 2) -> float:
    """Each rank forwards R-1 key/value blocks of seq/R tokens: (R-1) x 2 x (seq/R) x kv_width x bytes."""
    return (ranks - 1) * 2 * seq / ranks * kv_width * bytes_per_element


def allgather_kv_bytes_per_rank(seq: int, ranks: int, kv_width: int, bytes_per_element: int = 2) -> float:
    """A ring all-gather of K and V: each rank sends (R-1)/R of the whole K and V, as many bytes as the ring."""
    return (ranks - 1) / ranks * 2 * seq * kv_width * bytes_per_element


def ulysses_kv_heads_per_rank(ranks: int, kv_heads: int) -> int:
    """Key/value heads each rank attends with after the all-to-all: g/c, or 1 (a copy) when c > g."""
    return max(kv_heads // ranks, 1)


def ulysses_bytes_per_rank(
    seq: int, ranks: int, heads: int, kv_heads: int, head_dim: int, bytes_per_element: int = 2
) -> float:
    """Two all-to-alls per forward: Q, K, V in, the output back. A rank keeps 1/c of what it holds and sends the
    rest; beyond c = g it sends each other rank the key/value head that rank's query heads use."""
    tokens = seq / ranks
    kv = ulysses_kv_heads_per_rank(ranks, kv_heads)
    q_and_out = 2 * tokens * heads / ranks * head_dim * (ranks - 1)
    k_and_v = 2 * tokens * kv * head_dim * (ranks - 1)
    return (q_and_out + k_and_v) * bytes_per_element


def ulysses_feasible(ranks: int, heads: int, kv_heads: int) -> bool:
    """Ulysses splits heads: c must divide the query heads, and the key/value heads or be a multiple of them."""
    return heads % ranks == 0 and (kv_heads % ranks == 0 or ranks % kv_heads == 0)


def attention_flops_per_rank(seq: int, ranks: int, heads: int, head_dim: int, causal: bool = True) -> float:
    """Forward attention FLOPs per rank: 4 s (s/c) h d (Q K^T and P V), half of it with a causal mask."""
    return 4 * seq * seq / ranks * heads * head_dim * (0.5 if causal else 1.0)


@dataclass(frozen=True, kw_only=True)
class CPChoice:
    """One option's cost per layer and forward pass on one GPU."""

    option: str
    feasible: bool
    bytes_per_rank: float
    """Bytes each GPU sends."""
    comm_seconds: float
    """Time on the wire at the link's one-direction rate."""
    exposed_seconds: float
    """What the attention does not hide: all of it for an all-to-all or an all-gather before attention; for the
    ring, per hop, what the transfer takes beyond the attention on the block that arrived before."""
    attention_seconds: float
    """The layer's attention forward on one GPU at the given rate (the same for every option)."""


def context_parallel_options(
    *,
    seq: int,
    ranks: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    flops_per_s: float,
    link_bytes_per_s: float,
    bytes_per_element: int = 2,
    causal: bool = True,
) -> list[CPChoice]:
    """The three options' bytes and exposed seconds, for one layer's forward pass on one GPU."""
    if min(seq, ranks, heads, kv_heads, head_dim) < 1 or flops_per_s <= 0 or link_bytes_per_s <= 0:
        raise ValueError("context_parallel_options: sizes, rates and bandwidth must be positive")
    kv_width = kv_heads * head_dim
    attn_s = attention_flops_per_rank(seq, ranks, heads, head_dim, causal) / flops_per_s
    ring = ring_bytes_per_rank(seq, ranks, kv_width, bytes_per_element)
    hops = ranks - 1
    per_hop_comm = ring / hops / link_bytes_per_s if hops else 0.0
    per_hop_attn = attn_s / ranks  # zigzag: every hop carries the same share of the unmasked pairs
    gather = allgather_kv_bytes_per_rank(seq, ranks, kv_width, bytes_per_element)
    uly = ulysses_bytes_per_rank(seq, ranks, heads, kv_heads, head_dim, bytes_per_element)
    return [
        CPChoice(
            option="ring",
            feasible=True,
            bytes_per_rank=ring,
            comm_seconds=ring / link_bytes_per_s,
            exposed_seconds=hops * max(0.0, per_hop_comm - per_hop_attn),
            attention_seconds=attn_s,
        ),
        CPChoice(
            option="allgather-kv",
            feasible=True,
            bytes_per_rank=gather,
            comm_seconds=gather / link_bytes_per_s,
            exposed_seconds=gather / link_bytes_per_s,
            attention_seconds=attn_s,
        ),
        CPChoice(
            option="ulysses",
            feasible=ulysses_feasible(ranks, heads, kv_heads),
            bytes_per_rank=uly,
            comm_seconds=uly / link_bytes_per_s,
            exposed_seconds=uly / link_bytes_per_s,
            attention_seconds=attn_s,
        ),
    ]


SLACK = 0.05  # exposed communication worth paying for the simplest option, as a share of the attention time


def choose_context_parallel(*, slack: float = SLACK, **kwargs) -> CPChoice:
    """The rule. All-gather KV when its exposed all-gather costs at most `slack` of the attention time (Llama 3's
    reasoning: with grouped-query attention keys and values are small, and one collective before attention
    takes any mask); otherwise, of the feasible options, the one that leaves the least exposed (the ring when
    its hops hide, Ulysses when they don't and c is within the heads). Takes `context_parallel_options`'s
    keyword arguments."""
    if not 0 <= slack < 1:
        raise ValueError(f"slack must be in [0, 1), got {slack!r}")
    options = [o for o in context_parallel_options(**kwargs) if o.feasible]
    gather = next(o for o in options if o.option == "allgather-kv")
    if gather.exposed_seconds <= slack * gather.attention_seconds:
        return gather
    order = {"ring": 0, "ulysses": 1, "allgather-kv": 2}  # ties go to the ring (hidden, any c)
    return min(options, key=lambda o: (o.exposed_seconds, order[o.option]))
