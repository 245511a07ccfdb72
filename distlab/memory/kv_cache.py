"""The KV cache: what autoregressive decoding keeps per token so that token t attends to 0..t-1 without
recomputing their keys and values. It is the memory that sizes inference, RL rollouts and evals: the weights are
paid once, the cache once per sequence in flight.

    MHA / GQA:  bytes = 2 · L · s · b · g · d · bytes_per_element     (K and V, g KV heads of width d, per layer)
    MLA:        bytes =     L · s · b · (r_kv + d_r) · bytes_per_element

MLA (DeepSeek-V2, https://arxiv.org/abs/2405.04434, Section 2.1.2-2.1.3, and V3) caches the compressed latent
c_KV of width r_kv (kv_lora_rank) and the one decoupled rotary key k_R of width d_r (qk_rope_head_dim) shared by
every head: per token and layer (d_c + d_h^R) elements, where MHA caches 2 · n_h · d_h. The heads' keys and values
are decompressed from the latent (or the up-projections absorbed into the query and output projections).

Formulas only (no torch): the `kv-cache` command and the planner-side sizing import this; the measured check on a
real cached decoder lives in distlab/memory/kv_cache_measured.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from distlab.core.cli import MAX_TOKENS, MAX_WIDTH, UsageError, command, emit, parser, positive
from distlab.core.formatting import format_quantity

BYTES_PER_ELEMENT = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
ATTENTIONS = ("mha", "gqa", "mla")


@dataclass(frozen=True, kw_only=True)
class CacheShape:
    """What one sequence's cache holds per token and layer."""

    layers: int
    """Transformer layers L."""
    attention: str = "gqa"
    """"mha" (g = a KV heads), "gqa" (g < a KV heads) or "mla" (a latent and a shared rotary key)."""
    kv_heads: int = 0
    """KV heads g (MHA/GQA)."""
    head_dim: int = 0
    """Width d of one key or value head (MHA/GQA)."""
    kv_lora_rank: int = 0
    """MLA: the cached latent's width r_kv."""
    rope_dim: int = 0
    """MLA: the shared rotary key's width d_r."""

    def __post_init__(self) -> None:
        if self.attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {', '.join(ATTENTIONS)}, not {self.attention!r}")
        if self.layers <= 0:
            raise ValueError(f"layers must be positive, got {self.layers}")
        if self.attention == "mla":
            if self.kv_lora_rank <= 0 or self.rope_dim < 0:
                raise ValueError("MLA needs --kv-lora-rank > 0 (and --rope-dim >= 0)")
        elif self.kv_heads <= 0 or self.head_dim <= 0:
            raise ValueError(f"{self.attention.upper()} needs --kv-heads and --head-dim")

    def elements_per_token(self) -> int:
        """Cached elements per token, all layers."""
        if self.attention == "mla":
            return self.layers * (self.kv_lora_rank + self.rope_dim)
        return 2 * self.layers * self.kv_heads * self.head_dim


def kv_cache_bytes(shape: CacheShape, *, seq: int, batch: int, bytes_per_element: int) -> int:
    """Bytes of the cache for `batch` sequences of `seq` tokens."""
    return shape.elements_per_token() * seq * batch * bytes_per_element


def sequences_that_fit(free_bytes: float, shape: CacheShape, *, seq: int, bytes_per_element: int) -> int:
    """Sequences of `seq` tokens whose caches fit in `free_bytes` (what bounds a rollout's or an eval's batch)."""
    per_seq = kv_cache_bytes(shape, seq=seq, batch=1, bytes_per_element=bytes_per_element)
    return max(int(free_bytes // per_seq), 0)


@command("kv-cache", "KV-cache bytes for inference, rollouts and evals: MHA, GQA (2·L·s·b·g·d) or MLA (latent)")
def kv_cache_command(argv: list[str]) -> int:
    p = parser(
        "kv-cache",
        "Bytes of the key/value cache autoregressive decoding keeps.\n"
        "  MHA/GQA: 2 · layers · seq · batch · kv_heads · head_dim · bytes per element\n"
        "  MLA:         layers · seq · batch · (kv_lora_rank + rope_dim) · bytes per element\n"
        "Weights, activations and the allocator's blocks (paged attention) are not included.",
    )
    p.add_argument("--layers", type=positive(int, MAX_WIDTH), required=True, help="transformer layers L")
    p.add_argument("--attention", choices=ATTENTIONS, default="gqa", help="mha, gqa (default) or mla")
    p.add_argument("--kv-heads", type=positive(int, MAX_WIDTH), help="KV heads g (MHA: the attention heads)")
    p.add_argument("--head-dim", type=positive(int, MAX_WIDTH), help="key/value head width d")
    p.add_argument("--kv-lora-rank", type=positive(int, MAX_WIDTH), help="MLA: latent width r_kv (DeepSeek-V3: 512)")
    p.add_argument("--rope-dim", type=positive(int, MAX_WIDTH), help="MLA: shared rotary key width d_r (V3: 64)")
    p.add_argument("--seq", type=positive(int, MAX_TOKENS), required=True, help="tokens per sequence s (prompt+output)")
    p.add_argument("--batch", type=positive(int, MAX_TOKENS), default=1, help="sequences in flight b (default 1)")
    p.add_argument("--dtype", choices=sorted(BYTES_PER_ELEMENT), default="bf16", help="cache dtype (default bf16)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    a = p.parse_args(argv)

    if a.attention == "mla" and (a.kv_heads or a.head_dim):
        raise UsageError(
            "distlab kv-cache: --kv-heads/--head-dim describe MHA/GQA; MLA takes --kv-lora-rank/--rope-dim"
        )
    if a.attention != "mla" and (a.kv_lora_rank or a.rope_dim):
        raise UsageError("distlab kv-cache: --kv-lora-rank/--rope-dim need --attention mla")
    try:
        shape = CacheShape(
            layers=a.layers,
            attention=a.attention,
            kv_heads=a.kv_heads or 0,
            head_dim=a.head_dim or 0,
            kv_lora_rank=a.kv_lora_rank or 0,
            rope_dim=a.rope_dim or 0,
        )
    except ValueError as exc:
        raise UsageError(f"distlab kv-cache: {exc}") from None
    nbytes = BYTES_PER_ELEMENT[a.dtype]
    total = kv_cache_bytes(shape, seq=a.seq, batch=a.batch, bytes_per_element=nbytes)
    out = {
        "attention": a.attention,
        "layers": a.layers,
        "kv_heads": a.kv_heads,
        "head_dim": a.head_dim,
        "kv_lora_rank": a.kv_lora_rank,
        "rope_dim": a.rope_dim,
        "seq": a.seq,
        "batch": a.batch,
        "dtype": a.dtype,
        "bytes_per_element": nbytes,
        "elements_per_token": shape.elements_per_token(),
        "bytes_per_token": shape.elements_per_token() * nbytes,
        "bytes_per_sequence": total // a.batch,
        "total_bytes": total,
    }
    text = (
        f"KV cache ({a.attention.upper()}, {a.dtype}), {a.batch} x {a.seq:,} tokens:\n"
        f"  per token     {format_quantity(out['bytes_per_token'], 'B'):>10}\n"
        f"  per sequence  {format_quantity(out['bytes_per_sequence'], 'B'):>10}\n"
        f"  total         {format_quantity(total, 'B'):>10}"
    )
    emit(out, a.json, text)
    return 0
