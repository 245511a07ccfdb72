"""Launch-bound steps (distlab.throughput.launch_bound): the closed forms against the replayed pipeline, awkward
sizes on purpose."""

import pytest

from distlab.throughput.launch_bound import (
    StepShape,
    elementwise_bound_bytes,
    launch_bound_tokens,
    matmul_bound_size,
    simulate_steps,
    step_seconds,
)


@pytest.mark.parametrize(
    ("kernels", "launch", "kernel", "host"),
    [(7, 3.0, 2.0, 5.0), (7, 2.0, 3.0, 5.0), (1, 1.0, 9.0, 0.0), (13, 0.7, 0.7, 2.3), (97, 5.0, 1.0, 40.0)],
)
def test_closed_forms_match_the_pipeline(kernels, launch, kernel, host):
    """Steady state with and without a per-step sync: max(H + Kc, Kg) and H + max(Kc, Kg) + min(c, g). Would catch
    a sync modelled as free, or the refill term dropped (the 1-kernel case is all refill)."""
    shape = StepShape(kernels=kernels, launch_s=launch, kernel_s=kernel, host_s=host)
    for sync in (False, True):
        assert simulate_steps(shape, sync, steps=40) == pytest.approx(step_seconds(shape, sync), rel=1e-12)


def test_launch_bound_tokens_by_hand_and_by_bisection():
    """T* = K c peak MFU / FLOPs per token: 555 kernels at 10 µs, 989 TFLOP/s, 40 %, 0.86 GFLOP/token -> 2,553.
    Bisection on 'K c > tokens x FLOPs / (peak MFU)' finds the same."""
    t = launch_bound_tokens(555, 10e-6, 0.86e9, 989e12, 0.4)
    assert t == pytest.approx(555 * 10e-6 * 989e12 * 0.4 / 0.86e9)
    lo, hi = 1.0, 1e7
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 555 * 10e-6 > mid * 0.86e9 / (989e12 * 0.4) else (lo, mid)
    assert t == pytest.approx(lo, rel=1e-9)
    with pytest.raises(ValueError):
        launch_bound_tokens(555, 10e-6, 0.86e9, 989e12, 1.5)


def test_kernel_sizes_by_hand():
    """5 µs at 3.35 TB/s = 16.75 MB; 2 n^3 = 5 µs x 989 TFLOP/s gives n = 1,352."""
    assert elementwise_bound_bytes(5e-6, 3.35e12) == pytest.approx(16.75e6)
    assert matmul_bound_size(5e-6, 989e12) == pytest.approx((5e-6 * 989e12 / 2) ** (1 / 3))
    assert round(matmul_bound_size(5e-6, 989e12)) == 1352
