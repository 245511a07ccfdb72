"""Chapter 7's realistic point-to-point time δ between pipeline stages."""

import pytest

from distlab.core.results import Result
from distlab.model_parallel.pipeline_schedules import realistic_p2p


@pytest.mark.parametrize("stages", [3, 8, 10])
def test_delta_is_message_time_over_stage_forward(stages):
    """δ = (s h 2 B / t) / NIC over the stage's forward 2 (N/p/t) s / peak, recomputed in float64 from the
    datasheet numbers typed here (H100 bf16 989 TFLOP/s, 400 Gb/s NDR, Llama 2 70B h = 8192). Would catch the
    message counted per sequence of another length, the TP split applied twice, or p dropped from the forward."""
    from distlab.models.shapes import preset

    r = Result("t")
    split, whole = realistic_p2p(r, stages)
    n, s, h = preset("70B").params(), 4096, 8192
    forward = 2.0 * n / stages / 8 * s / 989e12
    assert whole == pytest.approx(s * h * 2 / 50e9 / forward, rel=1e-9)
    assert split == pytest.approx(whole / 8, rel=1e-12)
    assert all(c.passed for c in r.claims)
