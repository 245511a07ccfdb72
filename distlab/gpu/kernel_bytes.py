"""The bytes a real decoder block's memory-bound kernels move, counted op by op: the check on the planner's
per-stack byte formulas (distlab.gpu.block_bytes, experiment kernel-bytes, chapter 13).

In eager PyTorch every aten operation that is not a view is one CUDA kernel, and a memory-bound kernel's time is
its bytes over the HBM bandwidth it reaches. So the count that matters is, for every non-matmul aten op of one
forward and one backward, what it reads and what it writes. A `TorchDispatchMode` sees each op with its real
tensors; the rule it applies is stated once (`op_bytes`): an op reads every distinct element of its inputs once
(a broadcast index is read once, not once per use) and writes every element of its outputs once; an in-place op
that overwrites its destination (copy_, zero_, index_put_, scatter_) does not read it; views, reshapes that need
no copy, and allocations move nothing. Matmuls and the attention kernel are counted apart: their time comes from
a FLOP rate (distlab.planner.kernels), not from these bytes.

The blocks are the frameworks' own, op for op, as their repositories write them:

- `MPTBlock`: LLM Foundry's MPT layer (llmfoundry/models/layers/blocks.py, attention.py, ffn.py, norm.py at the
  corpus's commit): low-precision LayerNorm, biased linears, exact GeLU, residual adds, and FlashAttention's
  variable-length interface, which gathers q, k and v to unpadded rows (flash_attn.bert_padding.index_first_axis)
  and scatters the output back (pad_input) even when no token is padding.
- `LlamaBlock`: torchtitan's Llama layer (torchtitan/models/llama/model.py and norms.py): RMSNorm computed in fp32
  by separate ops, rotary embeddings through complex multiplication, K and V repeated to every query head, fused
  scaled-dot-product attention, SwiGLU.
- the losses: flash-attn's fused cross-entropy (LLM Foundry), cross-entropy on fp32 logits (torchtitan), and
  Megatron's vocab-parallel cross-entropy in fp32 (Megatron-LM mpu/cross_entropy.py).

Run on CPU in bf16 with PyTorch's CPU flash-attention kernel standing in for FlashAttention (it takes and returns
the same tensors). The planner's closed forms must equal these counts exactly, at awkward sizes.
"""

from __future__ import annotations

from collections import Counter

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.gpu import block_bytes, block_bytes_checks

FREE = {  # ops that move no bytes: views, metadata, allocation without initialisation
    "view",
    "_unsafe_view",
    "t",
    "transpose",
    "permute",
    "expand",
    "alias",
    "as_strided",
    "slice",
    "select",
    "unsqueeze",
    "squeeze",
    "detach",
    "split",
    "split_with_sizes",
    "unbind",
    "_reshape_alias",
    "lift_fresh",
    "empty",
    "empty_like",
    "new_empty",
    "empty_strided",
    "new_empty_strided",
    "view_as_complex",
    "view_as_real",
    "_conj",
    "resolve_conj",
    "resolve_neg",
}
MATMUL = {"mm", "addmm", "bmm", "baddbmm"}
ATTENTION_PREFIX = "_scaled_dot_product"
OVERWRITE = {"copy_", "zero_", "fill_", "index_put_", "_index_put_impl_", "scatter_"}
"""In-place ops that replace their destination's contents: they write it without reading it."""
SCATTER = {"index_put_", "_index_put_impl_", "scatter_"}
"""Of those, the ones that write only as many elements as their source (values, src) holds."""
GATHER = {"index", "gather", "nll_loss_forward", "nll_loss_backward"}
"""Ops that read only some elements of their first input (the indexed ones: as many as the output for a gather, one
per row for the NLL loss), not all of it."""


def distinct_bytes(t) -> int:
    """Bytes of the distinct elements a tensor refers to: a broadcast (stride 0) dimension counts once."""
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride != 0:
            n *= size
    return n * t.element_size()


def op_bytes(name: str, args, kwargs, out) -> int:
    """Bytes one aten op reads and writes (the counting rule, stated once)."""
    import torch
    from torch.utils._pytree import tree_leaves

    outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
    written = sum(t.numel() * t.element_size() for t in outs)
    kw = {k: v for k, v in kwargs.items() if k != "out"}  # an out= destination is written, not read
    ins = [t for t in tree_leaves((args, kw)) if isinstance(t, torch.Tensor)]
    if name in OVERWRITE and ins:  # the destination is written, not read
        ins = ins[1:]
        if name in SCATTER and ins:  # and only where the source lands
            written = distinct_bytes(ins[-1])
    read = sum(distinct_bytes(t) for t in ins)
    if name in GATHER and ins:  # the indexed input is read where indexed only
        src = ins[1] if name == "nll_loss_backward" else ins[0]
        full = distinct_bytes(src)
        touched = written if name in ("index", "gather") else _rows(src) * src.element_size()
        read += min(full, touched) - full
    return read + written


def _rows(t) -> int:
    return t.numel() // t.shape[-1] if t.dim() else 1


def kind_of(name: str) -> str | None:
    """matmul, attention, memory (a memory-bound kernel), or None (moves nothing)."""
    base = name.rstrip("_") if not name.startswith("_") else name
    if base in FREE or name in FREE:
        return None
    if base in MATMUL:
        return "matmul"
    if name.startswith(ATTENTION_PREFIX):
        return "attention"
    return "memory"


_ACTIVE: list = []  # the counter in use (the attention stand-in books its kernel on it)


class _inside_attention:
    """Ops inside the attention stand-in are the kernel's own work: not counted as memory-bound kernels."""

    def __enter__(self):
        if _ACTIVE:
            _ACTIVE[-1].paused += 1

    def __exit__(self, *exc):
        if _ACTIVE:
            _ACTIVE[-1].paused -= 1


def _book(phase: str, ins, outs) -> None:
    if _ACTIVE:
        c = _ACTIVE[-1]
        c.bytes[(phase, "attention", "flash_attention")] += sum(distinct_bytes(t) for t in ins) + sum(
            t.numel() * t.element_size() for t in outs
        )
        c.kernels[(phase, "attention", "flash_attention")] += 1


def counter():
    """A TorchDispatchMode that adds up bytes (and kernels) by phase, kind and op."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class KernelCounter(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.phase = "forward"
            self.bytes: Counter = Counter()
            self.kernels: Counter = Counter()
            self.paused = 0

        def __enter__(self):
            _ACTIVE.append(self)
            return super().__enter__()

        def __exit__(self, *exc):
            _ACTIVE.remove(self)
            return super().__exit__(*exc)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if self.paused:
                return out
            name = func.overloadpacket.__name__
            kind = kind_of(name)
            if kind is not None:
                self.bytes[(self.phase, kind, name)] += op_bytes(name, args, kwargs, out)
                self.kernels[(self.phase, kind, name)] += 1
            return out

        def total(self, phase: str, kind: str = "memory") -> int:
            return sum(v for (p, k, _), v in self.bytes.items() if p == phase and k == kind)

    return KernelCounter()


# ---------------------------------------------------------------- the blocks, as the frameworks write them
def _modules():
    import torch
    from torch import nn
    from torch.nn import functional as F

    class IndexFirstAxis(torch.autograd.Function):
        """flash_attn.bert_padding.index_first_axis: a gather of the kept rows (torch.gather with the row index
        broadcast over the width), and a scatter into zeros backward."""

        @staticmethod
        def forward(ctx, x, indices):
            ctx.save_for_backward(indices)
            ctx.rows, width = x.shape[0], x[0].numel()
            flat = x.reshape(ctx.rows, width)
            return torch.gather(flat, 0, indices[:, None].expand(-1, width)).reshape(-1, *x.shape[1:])

        @staticmethod
        def backward(ctx, grad):
            (indices,) = ctx.saved_tensors
            width = grad[0].numel()
            flat = grad.reshape(-1, width)
            out = torch.zeros(ctx.rows, width, dtype=grad.dtype)
            out.scatter_(0, indices[:, None].expand(-1, width), flat)
            return out.reshape(ctx.rows, *grad.shape[1:]), None

    class IndexPutFirstAxis(torch.autograd.Function):
        """flash_attn.bert_padding.pad_input: the unpadded rows put back into a zero tensor; a gather backward."""

        @staticmethod
        def forward(ctx, values, indices, rows):
            ctx.save_for_backward(indices)
            out = torch.zeros(rows, *values.shape[1:], dtype=values.dtype)
            out[indices] = values
            return out

        @staticmethod
        def backward(ctx, grad):
            (indices,) = ctx.saved_tensors
            return grad[indices], None, None

    class Flash(torch.autograd.Function):
        """The FlashAttention kernel's contract, counted as one attention kernel: it takes q, k, v in (B, S, heads, D)
        layout (K and V with their own head count), returns the output in that layout and its log-sum-exp, and
        backward returns dq, dk, dv from q, k, v, the output, its gradient and the log-sum-exp. PyTorch's CPU kernel
        computes it; its own layout copies are not the GPU kernel's and are left out."""

        @staticmethod
        def forward(ctx, q, k, v):
            with _inside_attention():
                group = q.shape[2] // k.shape[2]
                qt, kt, vt = (t.detach().transpose(1, 2) for t in (q, k, v))
                y = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=group > 1)
                out = y.transpose(1, 2).contiguous()
            lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], dtype=torch.float32)
            ctx.save_for_backward(q, k, v, out, lse)
            _book("forward", (q, k, v), (out, lse))
            return out

        @staticmethod
        def backward(ctx, grad):
            q, k, v, out, lse = ctx.saved_tensors
            with _inside_attention(), torch.enable_grad():
                leaves = [t.detach().requires_grad_() for t in (q, k, v)]
                group = q.shape[2] // k.shape[2]
                qt, kt, vt = (t.transpose(1, 2) for t in leaves)
                y = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=group > 1)
                dq, dk, dv = torch.autograd.grad(y.transpose(1, 2), leaves, grad)
                dq, dk, dv = (t.contiguous() for t in (dq, dk, dv))
            _book("backward", (q, k, v, out, grad, lse), (dq, dk, dv))
            return dq, dk, dv

    def flash(q, k, v):
        return Flash.apply(q, k, v)

    class MPTBlock(nn.Module):
        """LLM Foundry's MPTBlock with attn_impl flash, norm_type low_precision_layernorm, biases (no_bias False),
        resid_pdrop 0 (nn.Dropout(0) returns its input), ffn_type mptmlp with GeLU."""

        def __init__(self, hidden: int, heads: int, ffn: int, tokens: int):
            super().__init__()
            self.heads, self.d = heads, hidden // heads
            self.register_buffer("indices", torch.arange(tokens), persistent=False)  # once per model forward
            self.norm_1, self.norm_2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.Wqkv = nn.Linear(hidden, 3 * hidden)
            self.out_proj = nn.Linear(hidden, hidden)
            self.up_proj, self.down_proj = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

        def forward(self, x):
            b, s, h = x.shape
            a = F.layer_norm(x, (h,), self.norm_1.weight, self.norm_1.bias)
            query, key, value = self.Wqkv(a).split([h, h, h], dim=2)
            indices = self.indices  # flash_attn_padding_info: every token kept (no padding)
            q, k, v = (IndexFirstAxis.apply(t.reshape(b * s, h), indices) for t in (query, key, value))
            q, k, v = (t.view(b, s, self.heads, self.d) for t in (q, k, v))  # the kernel's (nnz, a, D)
            o = flash(q, k, v).reshape(b * s, h)
            o = IndexPutFirstAxis.apply(o, indices, b * s).view(b, s, h)
            x = x + self.out_proj(o)
            m = F.layer_norm(x, (h,), self.norm_2.weight, self.norm_2.bias)
            return x + self.down_proj(F.gelu(self.up_proj(m)))

    class RMSNorm(nn.Module):
        """torchtitan's RMSNorm: x.float(), x * rsqrt(mean(x^2) + eps), back to the input dtype, times the weight."""

        def __init__(self, width: int, eps: float = 1e-5):
            super().__init__()
            self.eps, self.weight = eps, nn.Parameter(torch.ones(width))

        def forward(self, x):
            x32 = x.float()
            return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight

    class LlamaBlock(nn.Module):
        """torchtitan's TransformerBlock (norm_type rmsnorm, eager)."""

        def __init__(self, hidden: int, heads: int, kv_heads: int, ffn: int, seq: int):
            super().__init__()
            self.heads, self.kv, self.d = heads, kv_heads, hidden // heads
            self.attention_norm, self.ffn_norm = RMSNorm(hidden), RMSNorm(hidden)
            self.wq = nn.Linear(hidden, heads * self.d, bias=False)
            self.wk = nn.Linear(hidden, kv_heads * self.d, bias=False)
            self.wv = nn.Linear(hidden, kv_heads * self.d, bias=False)
            self.wo = nn.Linear(heads * self.d, hidden, bias=False)
            self.w1, self.w3 = nn.Linear(hidden, ffn, bias=False), nn.Linear(hidden, ffn, bias=False)
            self.w2 = nn.Linear(ffn, hidden, bias=False)
            freqs = 1.0 / (10000.0 ** (torch.arange(0, self.d, 2).float() / self.d))
            angles = torch.outer(torch.arange(seq).float(), freqs)
            self.register_buffer("freqs_cis", torch.polar(torch.ones_like(angles), angles), persistent=False)

        def rotary(self, x):
            b, s = x.shape[:2]
            xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
            out = torch.view_as_real(xc * self.freqs_cis[:s].view(1, s, 1, -1)).flatten(3)
            return out.type_as(x)

        def attention(self, x):
            b, s, _ = x.shape
            xq = self.wq(x).view(b, s, -1, self.d)
            xk = self.wk(x).view(b, s, -1, self.d)
            xv = self.wv(x).view(b, s, -1, self.d)
            xq, xk = self.rotary(xq), self.rotary(xk)
            rep = self.heads // self.kv
            if rep > 1:  # repeat_kv: unsqueeze, expand, reshape (a copy)
                xk, xv = (
                    t[:, :, :, None, :].expand(b, s, self.kv, rep, self.d).reshape(b, s, -1, self.d) for t in (xk, xv)
                )
            y = flash(xq, xk, xv)  # (B, S, a, D): SDPA's output transposed back, contiguous
            return self.wo(y.contiguous().view(b, s, -1))

        def forward(self, x):
            h = x + self.attention(self.attention_norm(x))
            m = self.ffn_norm(h)
            return h + self.w2(F.silu(self.w1(m)) * self.w3(m))

    return MPTBlock, LlamaBlock


def count_block(block: str, shape: dict, tokens_shape: tuple[int, int]) -> dict[str, float]:
    """Memory-bound bytes per token of one forward and one backward of `block` ("mpt" or "llama") in bf16, and
    the kernels each launches."""
    import torch

    MPTBlock, LlamaBlock = _modules()
    torch.manual_seed(0)
    b, s = tokens_shape
    if block == "mpt":
        module = MPTBlock(shape["hidden"], shape["heads"], shape["ffn"], b * s)
    else:
        module = LlamaBlock(shape["hidden"], shape["heads"], shape["kv_heads"], shape["ffn"], s)
    for p in module.parameters():  # FSDP's bf16 parameters; torchtitan's rotary table stays complex64
        p.data = p.data.to(torch.bfloat16)
    x = torch.randn(b, s, shape["hidden"], dtype=torch.bfloat16, requires_grad=True)
    seed = torch.randn(b, s, shape["hidden"], dtype=torch.bfloat16)
    c = counter()
    with c:
        y = module(x)
        c.phase = "backward"
        y.backward(seed)
    tokens = b * s
    return {
        "forward": c.total("forward") / tokens,
        "backward": c.total("backward") / tokens,
        "forward_kernels": sum(v for (p, k, _), v in c.kernels.items() if p == "forward" and k == "memory"),
        "backward_kernels": sum(v for (p, k, _), v in c.kernels.items() if p == "backward" and k == "memory"),
        "ops": {f"{p} {n}": v / tokens for (p, k, n), v in sorted(c.bytes.items()) if k == "memory"},
    }


def count_loss(kind: str, vocab: int, rows: int) -> tuple[float, float]:
    """Bytes per logit of the loss's memory-bound kernels, forward and backward, for bf16 logits (rows x vocab)."""
    import torch
    from torch.nn import functional as F

    torch.manual_seed(0)
    logits = torch.randn(rows, vocab, dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(0, vocab, (rows,))
    c = counter()
    with c:
        if kind == "torch-fp32":
            loss = F.cross_entropy(logits.float(), target)
        elif kind == "megatron-fp32":
            loss = _megatron_cross_entropy(logits.float(), target)
        else:
            raise ValueError(kind)
        c.phase = "backward"
        loss.backward()
    n = rows * vocab
    return c.total("forward") / n, c.total("backward") / n


def _megatron_cross_entropy(logits, target):
    """Megatron-LM's _VocabParallelCrossEntropy on one rank (mpu/cross_entropy.py at the SC21 commit): max, in-place
    subtract, the target's logit, exp in place, sum, and the softmax kept for backward; backward scales it in place.
    The all-reduces over the TP group move one value per row and are left out."""
    import torch

    class VocabParallelCrossEntropy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            x_max = torch.max(x, dim=-1)[0]
            x.sub_(x_max.unsqueeze(dim=-1))
            rows = torch.arange(x.shape[0])
            predicted = x[rows, y]
            exp = x
            torch.exp(x, out=exp)
            total = exp.sum(dim=-1)
            loss = torch.log(total) - predicted
            exp.div_(total.unsqueeze(dim=-1))
            ctx.save_for_backward(exp, y)
            return loss.mean()

        @staticmethod
        def backward(ctx, grad):
            softmax, y = ctx.saved_tensors
            grad_input = softmax
            grad_input[torch.arange(softmax.shape[0]), y] -= 1.0
            grad_input.mul_(grad / softmax.shape[0])
            return grad_input, None

    return VocabParallelCrossEntropy.apply(logits, target)


# ---------------------------------------------------------------- the experiment
SHAPES = {  # awkward on purpose: widths not powers of two, GQA groups of 3, odd token counts
    "llm-foundry": [
        dict(hidden=192, heads=3, kv_heads=3, ffn=768, batch=2, seq=37),
        dict(hidden=320, heads=5, kv_heads=5, ffn=1000, batch=1, seq=97),
    ],
    "torchtitan": [
        dict(hidden=192, heads=6, kv_heads=2, ffn=512, batch=2, seq=37),
        dict(hidden=256, heads=4, kv_heads=4, ffn=688, batch=1, seq=97),
    ],
}
BLOCK = {"llm-foundry": "mpt", "torchtitan": "llama"}


def label(sh: dict) -> str:
    """A shape as the table names it, from its own fields."""
    kv = f" / {sh['kv_heads']} KV" if sh["kv_heads"] != sh["heads"] else ""
    return f"h={sh['hidden']}, {sh['heads']} heads{kv}, f={sh['ffn']}, {sh['batch']} x {sh['seq']} tokens"


LOSS_VOCAB, LOSS_ROWS = 4000, 37


def spec(stack: str, sh: dict, stat_bytes: int = block_bytes.CUDA_STAT_BYTES) -> block_bytes.LayerSpec:
    """The planner's description of a counted block."""
    llama = stack == "torchtitan"
    return block_bytes.LayerSpec(
        tokens=sh["batch"] * sh["seq"],
        seq=sh["seq"],
        hidden=sh["hidden"],
        ffn=sh["ffn"],
        heads=sh["heads"],
        kv_heads=sh["kv_heads"],
        mlp="swiglu" if llama else "gelu",
        norm="rmsnorm" if llama else "layernorm",
        rope=llama,
        bias=not llama,
        stat_bytes=stat_bytes,
    )


def _read_back(r: Result, row: list, formula: tuple, layer: block_bytes.LayerSpec, h: int) -> None:
    """A table row's byte columns (x h, 0.1) and ratio (0.01) against the closed forms (block_bytes), which the
    counted bytes are claimed to equal, the fused ones priced again per token: a slip in how a column is printed
    shows here."""
    fused = [x / layer.tokens for x in block_bytes.layer_bytes("fused", layer)]
    printed = [float(str(cell).removesuffix(" h")) for cell in (row[2], row[3], row[5], row[6])]
    expected = [formula[0] / h, formula[1] / h, fused[0] / h, fused[1] / h]
    r.claim(
        f"{row[0]}, {row[1]}: the row's bytes per token (x h) as printed",
        max(abs(a - e) for a, e in zip(printed, expected, strict=True)),
        0.05,
        relation="<=",
    )
    r.claim(
        f"{row[0]}, {row[1]}: eager / fused as printed",
        float(row[7]),
        sum(formula) / sum(fused),
        abs_tol=0.005,
    )


CPU_STAT_BYTES = 2  # PyTorch's CPU layer norm keeps its statistics in the input dtype (CUDA's: fp32)


@experiment(
    "kernel-bytes",
    "bytes every memory-bound kernel of a real decoder block moves (LLM Foundry's MPT, torchtitan's Llama, their "
    "losses), counted op by op, against the planner's per-stack formulas",
)
def kernel_bytes(device: str) -> Result:
    """CPU only: the count is of bytes, not time, and is the same on any device."""
    r = Result("kernel-bytes")
    block_bytes_checks.fused_layer_by_hand(r)  # the fused column's stack: no real block counted, worked by hand
    rows = []
    for stack, shapes in SHAPES.items():
        for sh in shapes:
            counted = count_block(BLOCK[stack], sh, (sh["batch"], sh["seq"]))
            tokens = sh["batch"] * sh["seq"]
            stat = CPU_STAT_BYTES if stack == "llm-foundry" else block_bytes.CUDA_STAT_BYTES
            f, b = (x / tokens for x in block_bytes.layer_bytes(stack, spec(stack, sh, stat)))
            r.claim(f"{stack}, {label(sh)}: counted forward bytes per token = the formula", counted["forward"], f)
            r.claim(f"{stack}, {label(sh)}: counted backward bytes per token = the formula", counted["backward"], b)
            ff, fb = (x / tokens for x in block_bytes.layer_bytes("fused", spec(stack, sh)))
            h = sh["hidden"]
            if sh is shapes[0]:
                key = stack.replace("-", "_")
                ratio = (counted["forward"] + counted["backward"]) / (ff + fb)
                r.add(f"{key}_over_fused", ratio, "", f"{stack}: memory-bound bytes over the fused stack's (counted)")
                r.add(f"{key}_kernels", counted["forward_kernels"] + counted["backward_kernels"], "", "its kernels")
                r.add(f"{key}_forward_h", counted["forward"] / h, "h", f"{stack}: forward bytes per token (x h)")
                r.add(f"{key}_backward_h", counted["backward"] / h, "h", f"{stack}: backward bytes per token (x h)")
            rows.append(
                [
                    stack,
                    label(sh),
                    f"{counted['forward'] / h:.1f} h",
                    f"{counted['backward'] / h:.1f} h",
                    counted["forward_kernels"] + counted["backward_kernels"],
                    f"{ff / h:.1f} h",
                    f"{fb / h:.1f} h",
                    f"{(counted['forward'] + counted['backward']) / (ff + fb):.2f}",
                ]
            )
            _read_back(r, rows[-1], (f, b), spec(stack, sh), h)
    # MPT's layer by hand: forward 2 layer norms, 3 gathers (unpad q, k, v), zeros + index_put (pad), 2 residual
    # adds, GeLU = 10; backward 2 layer-norm backwards, GeLU's, 2 residual joins, 4 bias sums, 3 x (zeros + scatter)
    # for the gathers, 1 gather for the pad, 1 concatenation for the q, k, v split = 17
    r.claim(
        "LLM Foundry's MPT layer: memory-bound kernels counted = 10 forward + 17 backward, listed by hand",
        r.quantities["llm_foundry_kernels"].value,
        (2 + 3 + 2 + 2 + 1) + (2 + 1 + 2 + 4 + 3 * 2 + 1 + 1),
    )
    for key in ("llm_foundry", "torchtitan"):  # the quantities the page quotes against the table's first rows
        first = next(row for row in rows if row[0].replace("-", "_") == key)
        r.claim(f"{key}: the kernels quoted = the table's", r.quantities[f"{key}_kernels"].value, first[4])
        r.claim(
            f"{key}: the ratio quoted = the table's",
            r.quantities[f"{key}_over_fused"].value,
            float(first[7]),
            abs_tol=0.005,
        )
    r.table(
        "blocks",
        [
            "stack",
            "block",
            "forward bytes/token (counted)",
            "backward",
            "memory-bound kernels",
            "fused stack, forward (computed)",
            "backward",
            "eager / fused",
        ],
        rows,
        caption="Memory-bound bytes per token of one layer, counted op by op on this CPU in bf16 (measured), against "
        "the same layer as fused kernels would run it (computed); h is the model width",
    )
    for kind in ("torch-fp32", "megatron-fp32"):
        f, b = count_loss(kind, LOSS_VOCAB, LOSS_ROWS)
        ef, eb = block_bytes.loss_bytes_per_logit(kind)
        per_row = 128 / LOSS_VOCAB  # the per-row terms (a max, a sum, the loss, the target) the formula leaves out
        r.claim(f"{kind} cross-entropy: counted forward bytes per logit = the formula", f, ef, abs_tol=per_row)
        r.claim(f"{kind} cross-entropy: counted backward bytes per logit = the formula", b, eb, abs_tol=per_row)
        key = kind.replace("-", "_")
        r.add(f"{key}_forward", f, "B/logit", f"{kind} cross-entropy, forward bytes per logit (counted)")
        r.add(f"{key}_backward", b, "B/logit", f"{kind} cross-entropy, backward bytes per logit (counted)")
    return r
