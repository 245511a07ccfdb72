"""Number formats, loss scaling, master weights and fp8 against independent references: the published
constants of IEEE 754 and the FP8 paper, hand-computed scaler histories, ulps from math.frexp, and
rounding worked out in float64."""

import math

import pytest
import torch

from distlab.precision.fp8 import DelayedScaling, amax_scale, binades, quantize
from distlab.precision.loss_scaling import DynamicLossScaler, torch_scale_trace, train
from distlab.precision.master_weights import constant_updates, gap_up
from distlab.precision.number_formats import FORMATS, _running_sum, capture, counting_batch, flushed, fmt, small_model

# Published values: IEEE 754-2008 (binary16, binary32), bfloat16, NVIDIA's TF32, and Micikevicius et al. 2022,
# "FP8 Formats for Deep Learning", Table 1.
PUBLISHED = {
    "fp32": {"max": 3.4028234663852886e38, "min_normal": 2.0**-126, "min_subnormal": 2.0**-149, "eps": 2.0**-23},
    "tf32": {"min_normal": 2.0**-126, "eps": 2.0**-10},
    "fp16": {"max": 65504.0, "min_normal": 2.0**-14, "min_subnormal": 2.0**-24, "eps": 2.0**-10},
    "bf16": {"max": 3.3895313892515355e38, "min_normal": 2.0**-126, "min_subnormal": 2.0**-133, "eps": 2.0**-7},
    "fp8 e4m3": {"max": 448.0, "min_normal": 2.0**-6, "min_subnormal": 2.0**-9, "eps": 2.0**-3},
    "fp8 e5m2": {"max": 57344.0, "min_normal": 2.0**-14, "min_subnormal": 2.0**-16, "eps": 2.0**-2},
}


@pytest.mark.parametrize("f", FORMATS, ids=lambda f: f.name)
def test_layout_and_torch_match_published_constants(f):
    """Would catch an off-by-one in the bias or e4m3's missing infinity."""
    layout = f.layout()
    for key, value in PUBLISHED[f.name].items():
        assert layout[key] == value, key
    if f.dtype is not None:
        assert f.from_torch() == layout


def test_fp16_flushes_below_half_its_smallest_subnormal():
    """Round to nearest even: 2^-25 is a tie and goes to 0, just above it goes to 2^-24."""
    x = torch.tensor([2.0**-25, 2.0**-25 * 1.01, 2.0**-26])
    assert x.half().float().tolist() == [0.0, 2.0**-24, 0.0]
    assert flushed(x, x.half().float()) == pytest.approx(2 / 3)


def test_bf16_accumulation_stalls_where_the_gap_exceeds_twice_the_addend():
    """At 2048 the bf16 gap is 16: adding 6 rounds back to 2048. fp16's gap there is 2."""
    values = torch.full((600,), 6.0)
    assert _running_sum(values, torch.bfloat16) == 2048.0
    assert _running_sum(values, torch.float16) == 3600.0  # below 4096 every partial sum is on fp16's grid


# ---------------------------------------------------------------- loss scaling
def test_dynamic_scaler_history_by_hand():
    """Back off on overflow, grow after `interval` clean steps in a row, the count restarting at each change."""
    s = DynamicLossScaler(scale=1024.0, growth_interval=3)
    history = [False, True, False, False, False, False, False, False, True, False]
    got = []
    for found in history:
        s.update(found)
        got.append(s.scale)
    assert got == [1024, 512, 512, 512, 1024, 1024, 1024, 2048, 1024, 1024]


def test_dynamic_scaler_matches_torch_kernel_on_a_random_history():
    g = torch.Generator().manual_seed(3)
    history = (torch.rand(200, generator=g) < 0.1).tolist()
    s = DynamicLossScaler(scale=2.0**20, growth_interval=7)
    ours = []
    for found in history:
        s.update(found)
        ours.append(s.scale)
    assert ours == torch_scale_trace(history, 2.0**20, 7)


def test_bad_scaler_settings():
    with pytest.raises(ValueError):
        DynamicLossScaler(backoff_factor=1.5)


def test_overflowing_step_is_skipped_and_weights_untouched():
    """Would catch a scaler that applies an inf update (the weights would become NaN)."""
    trace = train(3, DynamicLossScaler(scale=2.0**40, growth_interval=100), batch=1)
    steps, opt_steps = trace[:-1], trace[-1]["optimizer_steps"]
    assert steps[0]["found_inf"] and steps[0]["moved"] == 0 and steps[0]["next_scale"] == 2.0**39
    assert opt_steps == sum(not t["found_inf"] for t in steps)


def test_capture_unscales_gradients():
    """fp32 gradients captured with a power-of-two loss scale equal those without (exact: scaling by 2^k)."""
    x, y = counting_batch(2)
    a = capture(small_model(), x, y)
    b = capture(small_model(), x, y, loss_scale=2.0**10)
    assert all(torch.equal(p, q) for p, q in zip(a["param_grads"], b["param_grads"]))


# ---------------------------------------------------------------- master weights
def _bf16_gap_up(w: float) -> float:
    """The bf16 spacing above w, from frexp: w = m 2^e with 0.5 <= |m| < 1, 8 significant bits."""
    if w == 0:
        return 2.0**-133
    m, e = math.frexp(abs(w))
    if w < 0 and m == 0.5:  # moving towards zero from a power of two: the binade below is twice as dense
        e -= 1
    return 2.0 ** (e - 8)


def test_gap_up_matches_frexp():
    ws = torch.tensor([1.0, -1.0, 0.02, -0.03125, 0.5, 3.0, -0.7, 0.0], dtype=torch.bfloat16)
    assert gap_up(ws).tolist() == [_bf16_gap_up(w) for w in ws.double().tolist()]


def test_constant_updates_stall_exactly_where_predicted():
    """1e-4 is below half the gap above 1.0 (2^-8) and above 0.02's (2^-14): one stalls, the other moves."""
    w0 = torch.tensor([1.0, 0.02, 0.0, 0.03125])
    out = constant_updates(w0, 1e-4, 100)
    assert out["never_moved"].tolist() == [True, False, False, True]
    assert out["direct"][0].item() == 1.0
    assert (out["master"].double() - out["exact"]).abs().max().item() <= 100 * 2.0**-24


# ---------------------------------------------------------------- fp8
def test_e4m3_per_tensor_scaling_error_is_half_an_ulp():
    """Every value that lands in e4m3's normal range after scaling is within 2^-4 of itself."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(10000, generator=g) * 1e-6
    q = quantize(x, torch.float8_e4m3fn, amax_scale(x.abs().max().item(), torch.float8_e4m3fn))
    normal = (x * amax_scale(x.abs().max().item(), torch.float8_e4m3fn)).abs() >= 2.0**-6
    assert ((q - x).abs() / x.abs())[normal].max().item() <= 2.0**-4
    assert quantize(x, torch.float8_e4m3fn).eq(0).float().mean().item() == 1.0  # unscaled: all below 2^-10


def test_saturation_and_overflow():
    x = torch.tensor([1e5, -1e5, 100.0])
    assert quantize(x, torch.float8_e4m3fn).tolist() == [448.0, -448.0, 96.0]
    assert quantize(x, torch.float8_e5m2).tolist() == [57344.0, -57344.0, 96.0]
    raw = quantize(x, torch.float8_e5m2, saturate=False)
    assert math.isinf(raw[0].item()) and math.isinf(raw[1].item()) and raw[2].item() == 96.0


def test_delayed_scaling_uses_the_largest_amax_of_its_window():
    d = DelayedScaling(torch.float8_e4m3fn, length=2)
    assert d.scale() == 1.0
    for amax in (4.0, 1.0, 2.0):
        d.record(torch.tensor([amax, -0.5]))
    assert d.scale() == 448.0 / 2.0  # 4.0 has left the window of 2


def test_binades_of_a_known_tensor():
    x = torch.tensor([2.0**-10] + [1.0] * 998 + [4.0])
    assert binades(x, quantile=0.001) == 12.0


def test_fmt_lookup():
    assert fmt("bf16").mantissa_bits == 7
    with pytest.raises(ValueError, match="unknown format"):
        fmt("fp4")
