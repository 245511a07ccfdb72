"""distlab.calculator against independent arithmetic: published parameter counts, the ZeRO paper's
per-stage formulas, Korthikanti et al.'s activation formulas, written out here in float64.

The browser test (test_browser.py) checks the page's JavaScript against these same functions; this
file checks the functions themselves.
"""

import json

import pytest

from distlab.calculator import DEFAULTS, Plan, evaluate, memory, plan_from, shape, site_data, vectors

LLAMA2_7B = 6_738_415_616  # the published config's parameter count
H100_BYTES = 80e9


def _plan(**kw) -> Plan:
    return plan_from(DEFAULTS | kw)


def test_7b_plain_data_parallel_holds_16_bytes_per_parameter():
    """ZeRO-0 keeps every state on every GPU: 2 + 2 + 12 bytes per parameter. Would catch a
    stage threshold off by one (sharding at stage 0)."""
    m = memory(_plan(zero=0, gpus=8))
    assert (m["weights"], m["gradients"], m["optimizer"]) == (2 * LLAMA2_7B, 2 * LLAMA2_7B, 12 * LLAMA2_7B)


@pytest.mark.parametrize(
    "zero, sharded", [(1, {"optimizer"}), (2, {"optimizer", "gradients"}), (3, {"optimizer", "gradients", "weights"})]
)
def test_each_zero_stage_shards_one_more_state_over_awkward_gpu_counts(zero, sharded):
    """7 GPUs do not divide 7B's parameters: each sharded state holds ceil(Ψ/7) elements (the flat
    buffer padded), the others all Ψ. Would catch a stage sharding the wrong state, or floor division."""
    m = memory(_plan(zero=zero, gpus=7))
    per = {"weights": 2, "gradients": 2, "optimizer": 12}
    ceil = -(-LLAMA2_7B // 7)
    for cat, b in per.items():
        assert m[cat] == b * (ceil if cat in sharded else LLAMA2_7B), cat


def test_70b_with_tensor_pipeline_and_data_parallelism():
    """70B on 64 GPUs, TP 8, PP 4, ZeRO-1, s 4096, b 1, selective recompute, in float64 from the
    formulas: weights 2Ψ/32, optimizer 12Ψ/32/2, activations L·sbh(10 + 24/t)."""
    p = shape("70B", 4096).params()
    m = memory(_plan(model="70B", gpus=64, tp=8, pp=4, zero=1))
    assert m["dp"] == 2
    assert m["weights"] == 2 * -(-p // 32)
    assert m["optimizer"] == pytest.approx(12 * p / 64, rel=1e-9)
    s, b, h, L = 4096, 1, 8192, 80
    assert m["activations"] == pytest.approx(L * s * b * h * (10 + 24 / 8), rel=1e-12)


@pytest.mark.parametrize(
    "recompute, sp, per_layer",
    [
        ("none", False, lambda s, b, h, a, t: s * b * h * (10 + 24 / t + 5 * a * s / (h * t))),
        ("selective", True, lambda s, b, h, a, t: s * b * h * 34 / t),
        ("full", False, lambda s, b, h, a, t: 2 * s * b * h),
        ("full", True, lambda s, b, h, a, t: 2 * s * b * h / t),
    ],
)
def test_activations_follow_korthikanti_table_2_at_awkward_sizes(recompute, sp, per_layer):
    """Sequence 257, micro-batch 3, TP 2, a custom width of 3000 with 24 heads. Would catch the
    activations using the wrong row of Table 2, or dividing by t where the paper does not."""
    custom = dict(
        layers=30, hidden=3000, heads=24, kv_heads=8, ffn=7777, vocab=50257, mlp="swiglu", tie_embeddings=False
    )
    m = memory(
        plan_from(
            DEFAULTS
            | custom
            | {
                "model": "custom",
                "seq": 257,
                "micro_batch": 3,
                "gpus": 6,
                "tp": 2,
                "recompute": recompute,
                "sequence_parallel": sp,
            }
        )
    )
    assert m["activations"] == pytest.approx(30 * per_layer(257, 3, 3000, 24, 2), rel=1e-12)


def test_verdict_compares_the_total_with_the_datasheet_memory():
    """Micro-batch 1 fits 7B on 8 x 80 GB with ZeRO-3; micro-batch 8 does not (activations grow with b)."""
    small, large = memory(_plan(micro_batch=1)), memory(_plan(micro_batch=8))
    assert small["capacity"] == H100_BYTES and small["fits"] and small["total"] < H100_BYTES
    assert not large["fits"] and large["total"] > H100_BYTES


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"gpus": 6, "tp": 4}, "multiple of TP x PP"),
        ({"pp": 3, "gpus": 3}, "split evenly"),
        ({"model": "13B", "tp": 3, "gpus": 3}, "divisible by TP"),
        ({"zero": 4}, "ZeRO stage"),
        ({"recompute": "some"}, "recompute"),
        ({"gpu": "H900"}, "unknown GPU"),
        ({"seq": 0}, "seq must be"),
        ({"model": "3B"}, "unknown model preset"),
    ],
)
def test_bad_inputs_are_refused_with_a_message(bad, message):
    """The page shows a refusal, never a wrong number, for these; distlab must refuse them too."""
    out = evaluate(DEFAULTS | bad)
    assert message in out["error"]


def test_vectors_are_stable_cover_every_preset_gpu_stage_and_both_verdicts():
    """The browser test is only as good as its vectors. Would catch vectors that change between two
    builds (a byte-unstable site) or that miss a preset, a GPU, a ZeRO stage or a verdict."""
    first, second = vectors(), vectors()
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)
    data = site_data()
    ok = [v for v in first if "error" not in v["expected"]]
    assert {v["input"]["model"] for v in first} >= set(data["presets"]) | {"custom"}
    assert {v["input"]["gpu"] for v in first} >= set(data["gpus"])
    assert {v["input"]["zero"] for v in ok} == {0, 1, 2, 3}
    assert {v["expected"]["fits"] for v in ok} == {True, False}
    assert len(first) - len(ok) >= 3
    assert {v["expected"]["display"]["total"][-2:] for v in ok} == {"GB"}  # as the site prints bytes
