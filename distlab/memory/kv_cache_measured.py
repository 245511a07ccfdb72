"""The KV cache counted on a real cached decoder: prefill a prompt, decode token by token, add up the bytes of the
tensors the cache holds, and check them against 2·L·s·b·g·d·bytes (MHA, GQA) and L·s·b·(r_kv + d_r)·bytes (MLA).

The decoder is the smallest one that has what the formulas count: L attention layers (MLP and norms left out: they
cache nothing), causal attention with g KV heads shared by a/g query heads each, or DeepSeek's multi-head latent
attention caching the latent c_KV and one rotary key for every head (rotation itself omitted: it changes values,
not bytes). The cached decode must give the same outputs as running the whole sequence at once without a cache, in
float64: a cache that held the wrong thing would change them.
"""

from __future__ import annotations

import re

import torch
from torch import nn
from torch.nn import functional as F

from distlab.core.experiments import experiment
from distlab.core.facts import entries, source, value
from distlab.core.results import Quantity, Result
from distlab.memory.kv_cache import BYTES_PER_ELEMENT, CacheShape, kv_cache_bytes, sequences_that_fit
from distlab.models.decoder import DecoderBlock
from distlab.models.layers import norm
from distlab.models.shapes import NOT_SHAPE, ModelShape, published_params
from distlab.runtime.threads import single_threaded


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offset: int) -> torch.Tensor:
    """Causal attention of queries at positions offset.. over keys 0..: q (B, a, t, d), k/v (B, a, S, d)."""
    t, s = q.shape[2], k.shape[2]
    mask = torch.ones(t, s, dtype=torch.bool, device=q.device).tril(diagonal=offset)  # query i sees keys <= offset + i
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class CachedGQA(nn.Module):
    """Grouped-query attention that appends each step's K and V (B, g, t, d) to its cache."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int):
        super().__init__()
        self.a, self.g, self.d = heads, kv_heads, head_dim
        self.q = nn.Linear(hidden, heads * head_dim, bias=False)
        self.kv = nn.Linear(hidden, 2 * kv_heads * head_dim, bias=False)
        self.o = nn.Linear(heads * head_dim, hidden, bias=False)

    def forward(self, x: torch.Tensor, cache: dict | None) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.a, self.d).transpose(1, 2)  # (B, a, t, d)
        k, v = self.kv(x).view(b, t, 2, self.g, self.d).permute(2, 0, 3, 1, 4)  # each (B, g, t, d)
        offset = 0
        if cache is not None:
            if "k" in cache:
                offset = cache["k"].shape[2]
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        rep = self.a // self.g  # every KV head serves a/g query heads
        y = attend(q, k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1), offset)
        return self.o(y.transpose(1, 2).reshape(b, t, self.a * self.d))


class CachedMLA(nn.Module):
    """Multi-head latent attention caching c_KV (B, t, r_kv) and the shared rotary key (B, t, d_r); every head's
    K and V are decompressed from the cached latent at each step (DeepSeek-V3's "naive" decode)."""

    def __init__(self, hidden: int, heads: int, kv_lora_rank: int, rope_dim: int, nope_dim: int, v_dim: int):
        super().__init__()
        self.a, self.r, self.dr, self.dn, self.dv = heads, kv_lora_rank, rope_dim, nope_dim, v_dim
        self.q = nn.Linear(hidden, heads * (nope_dim + rope_dim), bias=False)
        self.kv_a = nn.Linear(hidden, kv_lora_rank + rope_dim, bias=False)  # the latent and the shared rotary key
        self.kv_b = nn.Linear(kv_lora_rank, heads * (nope_dim + v_dim), bias=False)
        self.o = nn.Linear(heads * v_dim, hidden, bias=False)

    def forward(self, x: torch.Tensor, cache: dict | None) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.a, self.dn + self.dr).transpose(1, 2)
        latent, k_rot = self.kv_a(x).split([self.r, self.dr], dim=-1)  # (B, t, r), (B, t, dr)
        offset = 0
        if cache is not None:
            if "latent" in cache:
                offset = cache["latent"].shape[1]
                latent = torch.cat([cache["latent"], latent], dim=1)
                k_rot = torch.cat([cache["k_rot"], k_rot], dim=1)
            cache["latent"], cache["k_rot"] = latent, k_rot
        s = latent.shape[1]
        kv = self.kv_b(latent).view(b, s, self.a, self.dn + self.dv).transpose(1, 2)
        k_nope, v = kv.split([self.dn, self.dv], dim=-1)
        k = torch.cat([k_nope, k_rot[:, None].expand(b, self.a, s, self.dr)], dim=-1)
        y = attend(q, k, v, offset)
        return self.o(y.transpose(1, 2).reshape(b, t, self.a * self.dv))


class CachedDecoder(nn.Module):
    """Embedding, L residual attention layers, an output head; forward over new tokens with a per-layer cache."""

    def __init__(self, layers: list[nn.Module], hidden: int, vocab: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(layers)
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens: torch.Tensor, caches: list[dict] | None = None) -> torch.Tensor:
        x = self.embed(tokens)
        for i, layer in enumerate(self.layers):
            x = x + layer(x, caches[i] if caches is not None else None)
        return self.head(x)


def cache_bytes(caches: list[dict]) -> int:
    """Bytes of every tensor the caches hold (each storage once)."""
    seen, total = set(), 0
    for cache in caches:
        for t in cache.values():
            ptr = t.untyped_storage().data_ptr()
            if ptr not in seen:
                seen.add(ptr)
                total += t.untyped_storage().nbytes()
    return total


def decode(model: CachedDecoder, tokens: torch.Tensor, prompt: int) -> tuple[torch.Tensor, list[dict]]:
    """Prefill `prompt` tokens, then feed the rest one at a time; the logits of every position."""
    caches = [{} for _ in model.layers]
    out = [model(tokens[:, :prompt], caches)]
    for i in range(prompt, tokens.shape[1]):
        out.append(model(tokens[:, i : i + 1], caches))
    return torch.cat(out, dim=1), caches


LAYERS, HIDDEN, HEADS, HEAD_DIM, VOCAB = 3, 96, 6, 16, 101
SEQ, PROMPT, BATCH = 97, 90, 3  # 90-token prompt, 7 decoded tokens, 3 sequences
MLA = {"kv_lora_rank": 24, "rope_dim": 8, "nope_dim": 16, "v_dim": 16}
GQA_KV_HEADS = 2


def build(attention: str, dtype: torch.dtype, seed: int = 0) -> tuple[CachedDecoder, CacheShape]:
    torch.manual_seed(seed)
    if attention == "mla":
        layers = [CachedMLA(HIDDEN, HEADS, **MLA) for _ in range(LAYERS)]
        shape = CacheShape(layers=LAYERS, attention="mla", kv_lora_rank=MLA["kv_lora_rank"], rope_dim=MLA["rope_dim"])
    else:
        g = HEADS if attention == "mha" else GQA_KV_HEADS
        layers = [CachedGQA(HIDDEN, HEADS, g, HEAD_DIM) for _ in range(LAYERS)]
        shape = CacheShape(layers=LAYERS, attention=attention, kv_heads=g, head_dim=HEAD_DIM)
    return CachedDecoder(layers, HIDDEN, VOCAB).to(dtype), shape


@experiment(
    "kv-cache",
    "KV-cache bytes counted on a real cached decoder (MHA, GQA, MLA) against 2·L·s·b·g·d·bytes and MLA's latent, "
    "cached decode = uncached forward in float64; what a rollout batch fits beside Llama 3 70B",
)
@single_threaded
def kv_cache(device: str) -> Result:
    r = Result("kv-cache")
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    rows = []
    for attention in ("mha", "gqa", "mla"):
        model, shape = build(attention, torch.float64)
        model = model.to(device)
        with torch.no_grad():
            cached, caches = decode(model, tokens.to(device), PROMPT)
            full = model(tokens.to(device))
            err = float((cached - full).abs().max())
        r.claim(f"{attention}: cached decode = the uncached forward (float64)", err, 0.0, abs_tol=1e-10)
        per_dtype = {}
        for dtype_name, dtype in (("fp64", torch.float64), ("bf16", torch.bfloat16)):
            m, _ = build(attention, dtype)
            with torch.no_grad():
                _, caches = decode(m.to(device), tokens.to(device), PROMPT)
            nbytes = torch.finfo(dtype).bits // 8
            per_dtype[dtype_name] = measured = cache_bytes(caches)
            expected = (
                2 * LAYERS * SEQ * BATCH * shape.kv_heads * shape.head_dim * nbytes
                if attention != "mla"
                else LAYERS * SEQ * BATCH * (shape.kv_lora_rank + shape.rope_dim) * nbytes
            )
            r.claim(
                f"{attention}, {dtype_name}: cache bytes counted = the closed form",
                measured,
                expected,
                unit="B",
                formula="2·L·s·b·g·d·bytes" if attention != "mla" else "L·s·b·(r_kv + d_r)·bytes",
            )
        r.claim(
            f"{attention}: kv_cache_bytes() = the counted bf16 cache",
            kv_cache_bytes(shape, seq=SEQ, batch=BATCH, bytes_per_element=2),
            per_dtype["bf16"],
            unit="B",
        )
        per_layer = shape.elements_per_token() // LAYERS
        r.claim(
            f"{attention}: cached elements per token and layer = the counted fp64 cache / (L·s·b·8 B)",
            per_layer,
            per_dtype["fp64"] / (LAYERS * SEQ * BATCH * 8),
            unit="elements",
        )
        rows.append([attention.upper(), per_layer, Quantity(per_dtype["bf16"], "B")])
        r.add(f"{attention}_bytes", per_dtype["bf16"], "B", f"{attention}: bf16 cache, counted")
    r.table(
        "counted",
        [
            "attention",
            "cached elements per token and layer",
            "bf16 cache (counted)",
        ],
        rows,
        caption=f"A {LAYERS}-layer decoder, {HEADS} query heads of width {HEAD_DIM} (GQA: {GQA_KV_HEADS} KV heads; "
        f"MLA: latent {MLA['kv_lora_rank']}, rotary key {MLA['rope_dim']}), {BATCH} sequences of {SEQ} tokens "
        f"({PROMPT} prefilled, the rest decoded one by one); in float64 each cached decode equals the uncached "
        "forward to rounding (its residue is in the claims below)",
    )
    for k, v in {"layers": LAYERS, "seq": SEQ, "batch": BATCH, "prompt": PROMPT}.items():
        r.add(k, v, "", k)
    _real_models(r)
    return r


# The sentence of Meta's release repository (meta-llama/llama3, README, "Inference") that prints Llama 3's sequence
# length, quoted in the data file's source `llama3-repo`: the typed `seq` fields are claimed against its number.
SEQ_QUOTE = r"All models support sequence length up to ([0-9]+) tokens"


def counted_on_meta(shape: ModelShape, seq: int, dtype: torch.dtype = torch.bfloat16) -> int:
    """Bytes of K and V the cached decoder above holds after one sequence of `seq` tokens (`seq` - 1 prefilled, the
    last decoded), built at a real model's widths on the meta device: every tensor has its shape and dtype, none its
    memory, so a 70B model's cache is counted without allocating it: the sum of the cached tensors' nbytes (meta
    tensors have no storage to deduplicate, so cache_bytes() does not apply)."""
    with torch.device("meta"):
        layers = [CachedGQA(shape.hidden, shape.heads, shape.kv, shape.head_dim) for _ in range(shape.layers)]
        model = CachedDecoder(layers, shape.hidden, shape.vocab).to(dtype)
        tokens = torch.zeros(1, seq, dtype=torch.long)
    with torch.no_grad():
        _, caches = decode(model, tokens, seq - 1)
    return sum(t.nbytes for cache in caches for t in cache.values())


def weights_on_meta(shape: ModelShape, dtype: torch.dtype = torch.bfloat16) -> int:
    """Bytes of a model's weights counted on torch modules built at its shape on the meta device (the library's
    DecoderBlock, an embedding, the final norm, an untied output head): every parameter has its shape and dtype, none
    its memory."""
    with torch.device("meta"):
        embed, final_norm = nn.Embedding(shape.vocab, shape.hidden), norm(shape.norm_kind, shape.hidden)
        head = nn.Linear(shape.hidden, shape.vocab, bias=False)
        block = DecoderBlock(shape.block(), max_seq=8)  # every layer alike: one built, counted L times

    def nbytes(m: nn.Module) -> int:
        return sum(p.to(dtype).nbytes for p in m.parameters())

    return nbytes(embed) + nbytes(final_norm) + nbytes(head) + shape.layers * nbytes(block)


# NVIDIA's H100 datasheet, the SXM column's memory row, quoted in kv_cache.toml's source `h100-datasheet-memory`:
# the node's capacity is re-derived from the figure it prints, apart from gpus.toml's typed field
HBM_QUOTE = r"GPU Memory \| ([0-9]+)GB \|"
NODE_GPUS = 8  # the rollout node's GPUs, an input the page states as kv-cache.node_gpus


def _llama3_inputs_checked(r: Result) -> ModelShape:
    """Llama 3 70B's typed fields against references that do not read them: the released checkpoint's parameter
    count (layers, hidden, heads, kv_heads, ffn and vocab all enter the count; heads through the k/v projections'
    width g·h/a) and the number the release repository's sentence prints (seq)."""
    row = entries("llama3_models")["Llama-3-70B"]  # this model alone: a typo in another stays that model's failure
    shape = ModelShape(**{k: v for k, v in row.items() if k not in NOT_SHAPE})
    r.claim(
        "Llama 3 70B shape (layers, hidden, heads, KV heads, FFN, vocab): derived parameter count = the released "
        "checkpoint's safetensors count",
        shape.params(),
        published_params("Llama-3-70B"),
        unit="params",
    )
    quoted = int(re.search(SEQ_QUOTE, source("llama3_models", "llama3-repo").detail).group(1))
    for name in ("Llama-3-8B", "Llama-3-70B"):
        r.claim(
            f"{name.replace('-', ' ')} seq = the sequence length the release README's sentence prints",
            value(f"llama3_models.{name}.seq"),
            quoted,
            unit="tokens",
        )
    return shape


def _real_models(r: Result) -> None:
    """Per-token caches of published shapes, and the rollout batch a node fits beside Llama 3 70B's weights."""
    ll70 = CacheShape(
        layers=value("llama3_models.Llama-3-70B.layers"),
        kv_heads=value("llama3_models.Llama-3-70B.kv_heads"),
        head_dim=value("llama3_models.Llama-3-70B.hidden") // value("llama3_models.Llama-3-70B.heads"),
    )
    ll70_mha = CacheShape(
        layers=ll70.layers, attention="mha", kv_heads=value("llama3_models.Llama-3-70B.heads"), head_dim=ll70.head_dim
    )
    dsv3 = CacheShape(
        layers=value("moe_models.DeepSeek-V3.layers"),
        attention="mla",
        kv_lora_rank=value("moe_models.DeepSeek-V3.kv_lora_rank"),
        rope_dim=value("moe_models.DeepSeek-V3.qk_rope_head_dim"),
    )
    bf16 = BYTES_PER_ELEMENT["bf16"]
    per_token = {
        name: s.elements_per_token() * bf16 for name, s in {"ll70": ll70, "ll70_mha": ll70_mha, "dsv3": dsv3}.items()
    }
    r.add("llama70_per_token", per_token["ll70"], "B", "Llama 3 70B (GQA, 8 KV heads), bf16, per token")
    r.add("llama70_mha_per_token", per_token["ll70_mha"], "B", "Llama 3 70B as if MHA (64 KV heads), per token")
    r.add("dsv3_per_token", per_token["dsv3"], "B", "DeepSeek-V3 (MLA), bf16, per token")
    published = value("kv_cache.deepseek-v3-insights.kv_bytes_per_token")
    r.claim("DeepSeek-V3 per token: our formula vs the paper's Table 1 (70.272 KB)", per_token["dsv3"], published)
    r.claim(
        "GQA's saving = a/g",
        per_token["ll70_mha"] / per_token["ll70"],
        value("llama3_models.Llama-3-70B.heads") / value("llama3_models.Llama-3-70B.kv_heads"),
    )
    # A rollout node: 8 GPUs, bf16 weights of Llama 3 70B, the rest for the cache (no activations counted)
    seq = value("llama3_models.Llama-3-70B.seq")
    gpus, hbm = NODE_GPUS, value("gpus.H100-SXM.hbm_gb") * 1e9
    weights = 2 * value("llama3_models.Llama-3-70B.params_published")
    free = gpus * hbm - weights
    fit = sequences_that_fit(free, ll70, seq=seq, bytes_per_element=bf16)
    per_seq = kv_cache_bytes(ll70, seq=seq, batch=1, bytes_per_element=bf16)
    r.claim("sequences that fit x cache per sequence <= free HBM", fit * per_seq, free, relation="<=", unit="B")
    r.claim("one more sequence would not fit", (fit + 1) * per_seq, free, relation=">=", unit="B")
    checked = _llama3_inputs_checked(r)
    counted = counted_on_meta(checked, seq)
    r.claim(
        "Llama 3 70B cache per rollout = K and V counted on a cached decoder of its checked shape (meta device)",
        per_seq,
        counted,
        unit="B",
    )
    on_meta = weights_on_meta(checked)
    r.claim(
        "Llama 3 70B bf16 weights = its parameters' bytes counted on a meta-device model of its checked shape",
        weights,
        on_meta,
        unit="B",
    )
    printed = int(re.search(HBM_QUOTE, source("kv_cache", "h100-datasheet-memory").detail).group(1))
    r.claim(
        f"HBM left on the node = {gpus} x the datasheet's printed {printed} GB (10^9 B) - the weights counted on meta",
        free,
        gpus * printed * 10**9 - on_meta,
        unit="B",
    )
    r.add("node_gpus", gpus, "GPUs", "GPUs of the rollout node")
    r.add("node_weights", weights, "B", "Llama 3 70B bf16 weights")
    r.add("node_free", free, "B", "HBM left for the cache")
    r.add("rollout_seq", seq, "tokens", "tokens per rollout (prompt + response)")
    r.add("llama70_per_seq", per_seq, "B", "cache per rollout")
    r.add("rollouts_fit", fit, "sequences", "rollouts in flight the node's HBM holds")
    fit_2x = sequences_that_fit(free, ll70, seq=2 * seq, bytes_per_element=bf16)
    r.add("rollouts_fit_2x", fit_2x, "sequences", "the same with rollouts twice as long")
    r.add(
        "rollouts_fit_fp8",
        sequences_that_fit(free, ll70, seq=seq, bytes_per_element=1),
        "sequences",
        "the same with an fp8 cache",
    )
    r.claim("twice the length: half the rollouts (to one, by rounding)", fit_2x, fit // 2, abs_tol=1)
    fp8_fit = r.quantities["rollouts_fit_fp8"].value
    r.claim("fp8 cache: rollouts = free // (counted / 2)", fp8_fit, free // (counted / 2))
    r.add(
        "rollouts_fit_mha",
        sequences_that_fit(free, ll70_mha, seq=seq, bytes_per_element=bf16),
        "sequences",
        "the same as if the model were MHA",
    )
    mha = checked.heads / checked.kv  # every query head its own K and V
    mha_fit = r.quantities["rollouts_fit_mha"].value
    r.claim("as MHA: rollouts = free // (counted x a/g)", mha_fit, free // (counted * mha))
