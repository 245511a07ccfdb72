"""Attention three ways against an independent float64 reference written here.

Exactness: the tiled (online-softmax) reference equals float64 attention to rounding (~1e-15) for any N,
block shape and mask. The Triton kernel is only close: in fp32/bf16/fp16 its error against float64 must be
at most 2 x PyTorch's own same-dtype error plus the dtype's rounding slack (the FlashAttention
repository's rule). On CPU the kernel runs in Triton's interpreter, so sizes stay small (N up to 1000).
"""

import math

import pytest
import torch

from distlab.attention.flash_attention import (
    TiledAttention,
    attention,
    forward_backward,
    online_softmax_trace,
    peak_bytes,
    random_qkv,
    rounding_atol,
    tiled_forward,
)
from distlab.attention.flash_attention_bench import attention_flops, flash_attention_bench, run_grid, shapes
from distlab.attention.triton_kernel import _FP32, _HALF, flash_backward, flash_forward

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def reference(q, k, v, do, causal):
    """float64 attention by the definition, with its own softmax, and autograd for the gradients."""
    q, k, v = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        keep = torch.arange(n)[:, None] >= torch.arange(n)[None, :]
        s = torch.where(keep.to(s.device), s, torch.tensor(float("-inf"), dtype=s.dtype, device=s.device))
    e = torch.exp(s - s.max(-1, keepdim=True).values)
    o = (e / e.sum(-1, keepdim=True)) @ v
    o.backward(do.double())
    lse = torch.logsumexp(s, -1)
    return [o.detach(), q.grad, k.grad, v.grad], lse.detach()


def max_err(xs, refs):
    return [(x.double() - r).abs().max().item() for x, r in zip(xs, refs)]


# ---------------------------------------------------------------- tiled reference: exact
@pytest.mark.parametrize("n,blocks", [(1, (64, 64)), (97, (64, 64)), (97, (16, 48)), (257, (32, 16))])
@pytest.mark.parametrize("causal", [False, True])
def test_tiled_equals_float64_attention(n, causal, blocks):
    """Would catch a wrong rescale exp(m_old - m_new), a causal loop bound that skips the diagonal block,
    or a ragged last block dropped (N not a multiple of the block). Head dim 24: not a power of two."""
    q, k, v, do = random_qkv(1, 2, n, 24, torch.float64)
    refs, lse_ref = reference(q, k, v, do, causal)
    qq, kk, vv = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    o = TiledAttention.apply(qq, kk, vv, causal, None, *blocks)
    o.backward(do)
    assert max(max_err([o, qq.grad, kk.grad, vv.grad], refs)) < 1e-12
    _, lse = tiled_forward(q.detach(), k.detach(), v.detach(), causal, None, *blocks)
    assert (lse - lse_ref).abs().max().item() < 1e-12


def test_online_softmax_trace_ends_at_the_softmax_denominator():
    """Would catch a running sum that is not rescaled when the max moves (blocks 2 and 4 raise it)."""
    scores = [0.5, -1.0, 3.0, 7.0, 2.0, -4.0, 7.5]
    trace = online_softmax_trace(scores, 2)
    assert [row[2] for row in trace] == [0.5, 7.0, 7.0, 7.5]
    assert trace[-1][4] == pytest.approx(sum(math.exp(x - 7.5) for x in scores), rel=1e-15)


# ---------------------------------------------------------------- the Triton kernel: close, by the FA rule
KERNEL_CASES = [  # (dtype, head dim, causal, N): every dtype, head dim and mask at least once, awkward N
    (torch.float32, 32, False, 97),
    (torch.float32, 64, True, 257),
    (torch.float32, 128, True, 97),
    (torch.bfloat16, 64, False, 97),
    (torch.bfloat16, 128, True, 257),
    (torch.bfloat16, 32, True, 97),
    (torch.float16, 64, True, 97),
    (torch.float16, 128, False, 97),
    (torch.float16, 32, False, 257),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype,d,causal,n", KERNEL_CASES)
def test_kernel_error_within_twice_pytorchs_same_dtype_error(device, dtype, d, causal, n):
    """Would catch a wrong mask, a wrong scale in the backward (dK, dQ), P cast to the wrong dtype before
    P V, or a log-sum-exp stored in the wrong base."""
    q, k, v, do = random_qkv(1, 2, n, d, torch.float64, device)
    refs, _ = reference(q, k, v, do, causal)
    low = [t.to(dtype) for t in (q, k, v, do)]
    ours = max_err(forward_backward("triton", *low, causal), refs)
    torch_err = max_err(forward_backward("naive", *low, causal), refs)
    atol = rounding_atol(refs, dtype)
    for name, a, b in zip(("O", "dQ", "dK", "dV"), ours, torch_err):
        assert a <= 2 * b + atol, f"{name}: kernel {a:.3g} vs PyTorch {b:.3g} (+{atol:.3g})"


def test_kernel_at_n_1000_bf16_causal():
    """The issue's largest awkward size: 1000 = 15 full 64-blocks and a ragged one."""
    q, k, v, do = random_qkv(1, 1, 1000, 64, torch.float64)
    refs, _ = reference(q, k, v, do, True)
    low = [t.to(torch.bfloat16) for t in (q, k, v, do)]
    ours = max_err(forward_backward("triton", *low, True), refs)
    torch_err = max_err(forward_backward("naive", *low, True), refs)
    atol = rounding_atol(refs, torch.bfloat16)
    assert all(a <= 2 * b + atol for a, b in zip(ours, torch_err))


@pytest.mark.parametrize("config", [(64, 32, 4, 2), (32, 16, 4, 2)])
def test_poisoned_outputs_every_element_written_nothing_past_n(config):
    """Outputs and gradients are views into NaN-filled buffers with 5 extra rows; inputs are views with
    strides that are not contiguous. Would catch a store mask that skips rows (NaN left) or writes past
    N (padding overwritten), and a kernel that assumes contiguous strides."""
    n, d, pad = 97, 32, 5
    buffers = []

    def view(fill):
        buffers.append(torch.full((2, 3, n + pad, d), fill))
        return buffers[-1][:, :, :n]

    q64, k64, v64, do64 = random_qkv(2, 3, n, d, torch.float64, requires_grad=False)
    q, k, v, do = view(0.0), view(0.0), view(0.0), view(0.0)
    for dst, src in zip((q, k, v, do), (q64, k64, v64, do64)):
        dst.copy_(src)
    out, dq, dk, dv = view(float("nan")), view(float("nan")), view(float("nan")), view(float("nan"))
    lse = torch.full((2, 3, n), float("nan"))
    flash_forward(q, k, v, True, out=out, lse=lse, config=config)
    flash_backward(q, k, v, out, lse, do, True, dq=dq, dk=dk, dv=dv, config=config)
    refs, lse_ref = reference(q64, k64, v64, do64, True)
    for got, ref, buffer in zip((out, dq, dk, dv), refs, buffers[4:]):
        assert torch.isfinite(got).all()
        assert (got.double() - ref).abs().max().item() < 1e-5
        assert torch.isnan(buffer[:, :, n:]).all()  # the padding rows were never written
    assert (lse.double() * math.log(2) - lse_ref).abs().max().item() < 1e-5  # base 2 -> natural log


def test_block_sizes_must_nest_for_the_causal_split():
    q, k, v, _ = random_qkv(1, 1, 64, 32, requires_grad=False)
    with pytest.raises(ValueError, match="multiple"):
        flash_forward(q, k, v, True, config=(48, 32, 4, 2))


@pytest.mark.parametrize(
    "bad,match",
    [
        (lambda q: (q, q, q[:, :, :5], False, "triton"), "shape"),
        (lambda q: (q, q, q, False, "flash"), "impl"),
        (lambda q: (q[..., :24], q[..., :24], q[..., :24], False, "triton"), "head_dim"),
        (lambda q: (q.double(), q.double(), q.double(), False, "triton"), "dtype"),
    ],
)
def test_bad_input_raises_value_error(bad, match):
    q = torch.randn(1, 2, 16, 32)
    with pytest.raises(ValueError, match=match):
        attention(*bad(q))


# ---------------------------------------------------------------- memory
def test_peak_bytes_is_the_allocator_high_water_mark():
    """Would catch summing allocations without frees, or missing the CPU allocator's events."""

    def f():
        x = torch.empty(1000, 1000)  # 4 MB
        y = torch.empty(500, 1000)  # 2 MB: peak 6 MB
        del x
        z = torch.empty(1000, 1000)  # 4 MB again: still 6 MB
        return y, z

    assert peak_bytes(f, "cpu") == 6_000_000


def test_peak_memory_grows_as_n_squared_naive_and_n_tiled():
    """Doubling N: naive attention's peak grows ~4x (S and P are N x N); the tiled one's ~2x."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the allocator's events do not depend on it; a crowded machine runs faster
    peaks = {}
    try:
        _measure(peaks)
    finally:
        torch.set_num_threads(threads)
    assert peaks["naive", 1024] / peaks["naive", 512] > 3.3
    assert peaks["tiled", 1024] / peaks["tiled", 512] < 2.3
    assert peaks["naive", 1024] >= 2 * 1024 * 1024 * 4  # at least S and P in fp32


def _measure(peaks):
    for n in (512, 1024):
        q, k, v, do = random_qkv(1, 1, n, 64)
        for impl in ("naive", "tiled"):

            def step(impl=impl, q=q, k=k, v=v, do=do):
                o = (
                    TiledAttention.apply(q, k, v, False, None, 128, 128)
                    if impl == "tiled"
                    else attention(q, k, v, False, "naive")
                )
                o.backward(do)

            peaks[impl, n] = peak_bytes(step, "cpu")


# ---------------------------------------------------------------- benchmark plumbing (CPU smoke test)
def test_flops_convention():
    """4BHN^2d forward; halved when causal; forward + backward 3.5x (FlashAttention's benchmark)."""
    assert attention_flops(2, 3, 1000, 64, False, "fwd") == 4 * 2 * 3 * 1000**2 * 64
    assert attention_flops(2, 3, 1000, 64, True, "fwd") == 2 * 2 * 3 * 1000**2 * 64
    assert attention_flops(1, 1, 10, 8, False, "fwd+bwd") == 3.5 * 4 * 100 * 8
    with pytest.raises(ValueError):
        attention_flops(1, 1, 10, 8, False, "bwd")
    assert all(b * n == 16384 and h * d == 2048 for b, h, n, d, _ in shapes())


def test_run_grid_smoke_on_cpu():
    """Every row is either measured (TFLOP/s = FLOPs / seconds) or says why not; the budget stops the grid."""
    grid = [(1, 2, 64, 32, True)]
    rows = run_grid("cpu", grid, impls=["triton", "sdpa-math", "sdpa-efficient"], dtype=torch.float32)
    measured = [r for r in rows if "tflops" in r]
    assert {r["impl"] for r in measured} >= {"triton", "sdpa-math"}
    for r in measured:
        assert r["tflops"] == pytest.approx(r["flops"] / r["seconds"] / 1e12)
        assert r["flops"] == attention_flops(1, 2, 64, 32, True, r["mode"])
    assert all(r["skipped"].startswith("unsupported") for r in rows if r["impl"] == "sdpa-efficient")
    stopped = run_grid("cpu", grid, impls=["naive"], budget_s=-1)
    assert [r["skipped"] for r in stopped] == ["time budget", "time budget"]


def test_bench_on_cpu_measures_nothing_and_says_so():
    """On a CPU nothing is timed: the only claims are the checks of the published FlashAttention-2 figures the page
    shows until a GPU measurement replaces them (value claims, no clock)."""
    result = flash_attention_bench("cpu")
    assert all(c.kind == "value" and ("FlashAttention-2" in c.name or "paper" in c.name) for c in result.claims)
    assert len(result.tables["published"].rows) == 5 and result.tables["published"].kind == "published"
    assert "needs a CUDA GPU" in result.tables["needs_gpu"].rows[0][0]
    assert len(result.tables["plan"].rows) == len(shapes())


def _tuned_configs(name):
    return sorted(set(_HALF[name] + _FP32[name]))


@pytest.mark.parametrize("config", _tuned_configs("fwd"))
def test_every_forward_autotune_config_is_correct(config):
    """The GPU autotuner may pick any of these tiles; each must give the same O and L (causal, N=130 is
    ragged for every block size). Would catch a tile shape that breaks the causal split."""
    q, k, v, do = random_qkv(1, 2, 130, 64, requires_grad=False)
    refs, lse_ref = reference(q, k, v, do, True)
    out, lse = flash_forward(q, k, v, True, config=config)
    assert (out.double() - refs[0]).abs().max().item() < 1e-5
    assert (lse.double() * math.log(2) - lse_ref).abs().max().item() < 1e-5


@pytest.mark.parametrize("config", sorted(set(_tuned_configs("dkdv") + _tuned_configs("dq"))))
def test_every_backward_autotune_config_is_correct(config):
    q, k, v, do = random_qkv(1, 2, 130, 64, requires_grad=False)
    refs, _ = reference(q, k, v, do, True)
    out, lse = flash_forward(q, k, v, True, config=(64, 32, 4, 2))
    grads = flash_backward(q, k, v, out, lse, do, True, config=config)
    assert max(max_err(grads, refs[1:])) < 1e-5


def test_max_errors_a_nan_gradient_is_infinite_not_skipped():
    """A kernel whose dQ is NaN must not pass as O's small error (Python's max() skips a NaN that is not first)."""
    from distlab.attention.flash_attention import max_errors

    ref = [torch.zeros(3) for _ in range(4)]
    out = [torch.full((3,), 1e-7), torch.tensor([0.0, float("nan"), 0.0]), torch.zeros(3), torch.zeros(3)]
    assert max_errors(out, ref) == math.inf
    assert max_errors([torch.full((3,), 1e-7)] + ref[1:], ref) == pytest.approx(1e-7)


@pytest.mark.parametrize(("dtype", "fmt"), [(torch.float32, "fp32"), (torch.bfloat16, "bf16"), (torch.float16, "fp16")])
def test_rounding_slack_by_hand_equals_torch_casts(dtype, fmt):
    """The slack with each format's rounding written out (ties to even at 24, 8, 11 bits) equals PyTorch's casts;
    a bf16 slack computed as fp16 (11 bits) would differ."""
    from distlab.attention.flash_attention_checks import rounding_slack

    refs = [torch.randn(2000, generator=torch.Generator().manual_seed(s), dtype=torch.float64) * 3 for s in (0, 1)]
    assert rounding_slack([t.numpy() for t in refs], fmt) == rounding_atol(refs, dtype)
    assert rounding_slack([t.numpy() for t in refs], "fp16") != rounding_atol(refs, torch.bfloat16)
