"""The loss's logits, counted: the naive output head + cross-entropy (bf16 logits, upcast to fp32, log-softmax, its
gradient) holds several s x V tensors at once, the largest activation of a small model at a large vocabulary. A
chunked ("fused linear") cross-entropy computes the head, the loss and its gradient chunk by chunk of tokens inside
forward and keeps only the gradients with respect to the hidden states and the head's weight: no s x V tensor
outlives a chunk (Liger Kernel's FusedLinearCrossEntropy, Apple's Cut Cross-Entropy go further).

Measured two ways on a real forward + backward: the bytes autograd saves for backward (distlab.runtime.
saved_tensors), and the peak of every tensor alive at once, tracked op by op with a dispatch mode (`LiveBytes`).
"""

from __future__ import annotations

import weakref

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from distlab.core.experiments import experiment
from distlab.core.facts import value
from distlab.core.results import Quantity, Result
from distlab.memory import activation_checks
from distlab.runtime.saved_tensors import SavedTensors
from distlab.runtime.threads import single_threaded


class LiveBytes(TorchDispatchMode):
    """Bytes of every tensor storage created by an op while active and still alive, and their peak: what the
    allocator must hold, op by op (storages created before entering, such as the parameters, are not counted)."""

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0
        self._refs: dict[int, list[int]] = {}  # storage pointer -> [tensors alive on it, bytes]

    def _release(self, ptr: int) -> None:
        ref = self._refs[ptr]
        ref[0] -= 1
        if ref[0] == 0:
            self.live -= ref[1]
            del self._refs[ptr]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            if ptr == 0:
                continue
            if ptr in self._refs:
                self._refs[ptr][0] += 1
            else:
                self._refs[ptr] = [1, storage.nbytes()]
                self.live += storage.nbytes()
                self.peak = max(self.peak, self.live)
            weakref.finalize(t, self._release, ptr)
        return out


def naive_loss(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The usual head: bf16 logits, upcast to fp32 for a stable log-softmax (Hugging Face's `logits.float()`)."""
    logits = hidden.bfloat16() @ weight.bfloat16().T  # (N, V) bf16
    return F.cross_entropy(logits.float(), targets)  # (N, V) fp32, then its log-softmax


class ChunkedCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of hidden @ weight^T, chunk by chunk of `chunk` tokens, with the gradients computed in
    forward (softmax - one-hot, divided by N) and nothing of size N x V saved: backward scales them."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk: int):
        n = hidden.shape[0]
        grad_h, grad_w = torch.zeros_like(hidden), torch.zeros_like(weight)
        loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for i in range(0, n, chunk):
            h, t = hidden[i : i + chunk], targets[i : i + chunk]
            logits = (h.bfloat16() @ weight.bfloat16().T).float()  # (c, V): the only vocabulary-wide tensor
            lse = torch.logsumexp(logits, dim=-1)
            loss += (lse - logits.gather(1, t[:, None]).squeeze(1)).sum()
            logits.sub_(lse[:, None]).exp_()  # softmax, in place
            logits[torch.arange(len(t), device=t.device), t] -= 1  # - one-hot: d loss_sum / d logits
            logits.div_(n)
            g = logits.bfloat16()
            grad_h[i : i + chunk] = (g @ weight.bfloat16()).float()
            grad_w += (g.T @ h.bfloat16()).float()
        ctx.save_for_backward(grad_h, grad_w)
        return loss / n

    @staticmethod
    def backward(ctx, grad_out):
        grad_h, grad_w = ctx.saved_tensors
        return grad_h * grad_out, grad_w * grad_out, None, None


class Head(nn.Module):
    """The output head and its loss, naive or chunked, as one module (so SavedTensors can account it)."""

    def __init__(self, hidden: int, vocab: int, *, chunk: int = 0):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(vocab, hidden) * hidden**-0.5)
        self.chunk = chunk

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self.chunk:
            return ChunkedCrossEntropy.apply(x, self.weight, targets, self.chunk)
        return naive_loss(x, self.weight, targets)


TOKENS, HIDDEN, VOCAB, CHUNK = 1000, 64, 8000, 96  # 1000 = 10 x 96 + 40: a ragged last chunk


def run(chunk: int, device: str) -> dict:
    torch.manual_seed(0)
    head = Head(HIDDEN, VOCAB, chunk=chunk).to(device)
    x = torch.randn(TOKENS, HIDDEN, device=device, requires_grad=True)
    targets = torch.randint(0, VOCAB, (TOKENS,), device=device)
    live = LiveBytes()
    with live, SavedTensors(head) as saved:
        loss = head(x, targets)
        saved_bytes = saved.peak
        loss.backward()
    return {"loss": loss.item(), "grad_x": x.grad, "grad_w": head.weight.grad, "peak": live.peak, "saved": saved_bytes}


@experiment(
    "chunked-ce",
    "the output head + cross-entropy's logit memory: naive (bf16 logits upcast to fp32) against a chunked "
    "cross-entropy with the gradient in forward; same loss and gradients, peak and saved bytes counted",
)
@single_threaded
def chunked_ce(device: str) -> Result:
    r = Result("chunked-ce")
    naive, chunked = run(0, device), run(CHUNK, device)
    r.claim("chunked loss = naive loss", chunked["loss"], naive["loss"], rel_tol=1e-5)
    for g in ("grad_x", "grad_w"):
        err = float((chunked[g] - naive[g]).norm() / naive[g].norm())
        r.claim(f"chunked {g} = naive {g} (both bf16 matmuls)", err, 0.0, abs_tol=1e-2)
    nv = TOKENS * VOCAB
    r.table(
        "memory",
        ["loss", "saved for backward", "peak of live tensors", "peak per logit"],
        [
            [
                "naive (bf16 logits, fp32 upcast)",
                Quantity(naive["saved"], "B"),
                Quantity(naive["peak"], "B"),
                Quantity(naive["peak"] / nv, "B"),
            ],
            [
                f"chunked ({CHUNK} tokens)",
                Quantity(chunked["saved"], "B"),
                Quantity(chunked["peak"], "B"),
                Quantity(chunked["peak"] / nv, "B"),
            ],
        ],
        caption=f"{TOKENS} tokens, hidden {HIDDEN}, vocabulary {VOCAB}: forward and backward of the head and the "
        "loss; peak = the most bytes of tensors created by the step alive at once",
    )
    r.claim(
        "naive: saves at least the fp32 log-probabilities (N x V)",
        naive["saved"],
        nv * 4,
        relation=">=",
        unit="B",
        formula="N·V·4",
    )
    r.claim(
        "naive: peak at least bf16 logits + fp32 upcast + fp32 log-probabilities",
        naive["peak"],
        nv * (2 + 4 + 4),
        relation=">=",
        unit="B",
    )
    bound = 4 * CHUNK * VOCAB * 4 + 3 * (TOKENS + VOCAB) * HIDDEN * 4
    r.claim(
        "chunked: peak within four fp32 chunk-logits + the gradients",
        chunked["peak"],
        bound,
        relation="<=",
        unit="B",
        formula="4·c·V·4 + 3·(N + V)·h·4",
    )
    r.claim(
        "chunked: saves no N x V tensor (only grad_h and grad_w)",
        chunked["saved"],
        (TOKENS + VOCAB) * HIDDEN * 4,
        relation="<=",
        unit="B",
        formula="(N + V)·h·4",
    )
    r.add("naive_peak", naive["peak"], "B", "naive peak")
    r.add("chunked_peak", chunked["peak"], "B", "chunked peak")
    r.add("peak_ratio", naive["peak"] / chunked["peak"], "x", "naive peak / chunked peak")
    r.add("naive_bytes_per_logit", naive["peak"] / nv, "B", "naive peak per token x vocabulary entry")
    for k, v in {"tokens": TOKENS, "hidden": HIDDEN, "vocab": VOCAB, "chunk": CHUNK}.items():
        r.add(k, v, "", k)
    # At Llama 3 8B's vocabulary and training sequence, the naive head's peak scales as bytes/logit x s x V
    s, v = value("llama3_models.Llama-3-8B.seq"), value("llama3_models.Llama-3-8B.vocab")
    r.add("llama3_naive_peak", naive["peak"] / nv * s * v, "B", "naive peak scaled to Llama 3 8B, one sequence")
    r.add("llama3_chunk_logits", CHUNK * v * 4, "B", f"one {CHUNK}-token fp32 chunk of logits at Llama 3's vocabulary")
    activation_checks.chunked_ce(r)  # the numbers shown, against the table's relations and second sources
    return r
