"""distlab.calculator against independent arithmetic: published parameter counts, the ZeRO paper's
per-stage formulas, the architecture-exact activation formulas written out here by hand, the planner's usable
memory, and the JavaScript itself run under Node on every vector.

The browser test (tests/site/test_browser.py) checks the live page's JavaScript against these same functions;
this file checks the functions themselves.
"""

import json
import shutil
import sys
import types
from pathlib import Path

import pytest

from distlab.calculator import DEFAULTS, Job, evaluate, job_from, job_memory, presets, shape, site_data, vectors
from distlab.planner import config as planner_config

LLAMA2_7B = 6_738_415_616  # the published config's parameter count
REPO = Path(__file__).resolve().parents[1]


def _job(**kw) -> Job:
    return job_from(DEFAULTS | kw)


def test_7b_plain_data_parallel_holds_16_bytes_per_parameter():
    """ZeRO-0 keeps every state on every GPU: 2 + 2 + 12 bytes per parameter. Would catch a
    stage threshold off by one (sharding at stage 0)."""
    m = job_memory(_job(zero=0, gpus=8))
    assert (m["weights"], m["gradients"], m["optimizer"]) == (2 * LLAMA2_7B, 2 * LLAMA2_7B, 12 * LLAMA2_7B)


@pytest.mark.parametrize(("precision", "grads"), [("mixed-fp32-grads", 4), ("mixed-fp32-accum", 6)])
def test_fp32_gradient_conventions(precision, grads):
    """Megatron's fp32 main_grad (18 B/param) and fp32 accumulation beside bf16 gradients (20 B/param): only the
    gradients change. Would catch the option ignored or applied to the wrong state."""
    m = job_memory(_job(zero=0, precision=precision))
    assert (m["weights"], m["gradients"], m["optimizer"]) == (2 * LLAMA2_7B, grads * LLAMA2_7B, 12 * LLAMA2_7B)


@pytest.mark.parametrize(
    "zero, sharded", [(1, {"optimizer"}), (2, {"optimizer", "gradients"}), (3, {"optimizer", "gradients", "weights"})]
)
def test_each_zero_stage_shards_one_more_state_over_awkward_gpu_counts(zero, sharded):
    """7 GPUs do not divide 7B's parameters: each sharded state holds ceil(Ψ/7) elements (the flat
    buffer padded), the others all Ψ. Would catch a stage sharding the wrong state, or floor division."""
    m = job_memory(_job(zero=zero, gpus=7))
    per = {"weights": 2, "gradients": 2, "optimizer": 12}
    ceil = -(-LLAMA2_7B // 7)
    for cat, b in per.items():
        assert m[cat] == b * (ceil if cat in sharded else LLAMA2_7B), cat


def test_70b_with_tensor_pipeline_and_data_parallelism():
    """70B on 64 GPUs, TP 8, PP 4, ZeRO-1, s 4096, b 1, FlashAttention, in float64 from the formulas: weights
    2Ψ/32, optimizer 12Ψ/32/2, activations L (8sbh + 8sb + (4sbh + 4sbh·g/a + 4abs + 8sbf)/t), the first stage's."""
    p = shape("70B").params()
    m = job_memory(_job(model="70B", gpus=64, tp=8, pp=4, zero=1))
    assert m["dp"] == 2 and m["stage"] == "first" and m["logits"] == 0
    assert m["weights"] == 2 * -(-p // 32)
    assert m["optimizer"] == pytest.approx(12 * p / 64, rel=1e-9)
    s, h, a, g, f, t, L = 4096, 8192, 64, 8, 28672, 8, 80
    layer = 8 * s * h + 8 * s + (4 * s * h + 4 * s * h * g // a + 4 * a * s + 8 * s * f) / t
    assert m["activations"] == pytest.approx(L * layer, rel=1e-12)


def test_mlp_type_and_width_change_activations():
    """The issue's first symptom: quadrupling the MLP width from 11008 to 44032 left activations unchanged.
    Now the 8sbf term grows with it, and GeLU keeps 4sbf. Would catch the GPT formula back in the calculator."""
    base = DEFAULTS | {"model": "custom", **{k: v for k, v in site_data()["presets"]["7B"].items()}}
    narrow, wide = (job_memory(job_from(base | {"ffn": f}))["activations"] for f in (11008, 44032))
    assert wide - narrow == 32 * 8 * 4096 * (44032 - 11008)
    gelu = job_memory(job_from(base | {"mlp": "gelu"}))["activations"]  # GPT's family: LayerNorm too
    assert narrow - gelu == 32 * (4 * 4096 * 11008 - 2 * 4 * 4096)  # 4sbf fewer, one more fp32 statistic per norm


def test_flash_attention_switch_drops_the_scores():
    """Eager attention keeps the softmax output, 2as²b per layer; FlashAttention a log-sum-exp per row and head
    instead (multi-head attention: Q, K, V and O alike). Would catch the switch ignored."""
    flash, eager = (job_memory(_job(attention=a))["activations"] for a in ("flash", "eager"))
    s, a = 4096, 32
    assert eager - flash == 32 * (2 * a * s * s - 4 * a * s)


@pytest.mark.parametrize("name", ["175B", "Llama-3-8B", "Mixtral-8x7B"])
def test_presets_set_their_sequence_and_parameters_do_not_follow_it(name):
    """A preset brings its training sequence (GPT-3: 2048, Llama 3: 8192, Mixtral: 32768); its parameter count
    is its own whatever sequence is typed (GPT-3's learned positions are its 2048). Would catch the issue's
    GPT-3 that changed size with the sequence."""
    data = site_data()["presets"][name]
    m = presets()[name]
    assert data["seq"] == m.seq
    counts = {job_memory(_job(model=name, seq=s, gpus=64, tp=8))["params"] for s in (1024, 2048, 4096)}
    assert counts == {m.params()}


@pytest.mark.parametrize(
    ("name", "published"),
    [
        ("Llama-3-8B", 8_030_261_248),  # meta-llama/Llama-3.1-8B safetensors total
        ("Llama-3-70B", 70_553_706_496),
        ("Llama-3-405B", 405_853_388_800),
        ("Mixtral-8x7B", 46_702_792_704),  # mistralai/Mixtral-8x7B-v0.1 safetensors total
        ("7B", LLAMA2_7B),
    ],
)
def test_preset_parameter_counts_are_the_checkpoints(name, published):
    """Exact, as the released checkpoints report them. Would catch a shape typo in the data files, a missing
    router, or experts counted once."""
    assert job_memory(_job(model=name, seq=4096, gpus=64, tp=8))["params"] == published


def test_logits_are_their_own_category_and_the_heavier_stage_is_shown():
    """Llama 3 8B at s = 8192: the head and loss keep 4sbV + 4sbh + 12sb + 4 (fp32 log-probabilities dominate);
    with pipeline stages the last stage shows them only when it is the heavier one."""
    m = job_memory(_job(model="Llama-3-8B", seq=8192))
    s, v, h = 8192, 128256, 4096
    assert m["logits"] == 4 * s * v + 4 * s * h + 12 * s + 4 and m["stage"] == "only"
    first = job_memory(_job(model="Llama-3-8B", seq=8192, pp=2, gpus=8))
    assert first["stage"] == "first" and first["logits"] == 0
    full = job_memory(_job(model="Llama-3-8B", seq=8192, recompute="full"))
    last = job_memory(_job(model="Llama-3-8B", seq=8192, pp=4, gpus=8, recompute="full"))  # 2sbh layers: logits win
    assert last["stage"] == "last" and last["logits"] == m["logits"]
    assert last["activations"] == full["activations"] // 4


def test_verdict_uses_the_planners_usable_memory():
    """Fits against the planner's usable memory: the 81,559 MiB an H100 reports less the 723 MiB CUDA context and
    5 % fragmentation, read from the planner's module. Would catch the calculator judging against the full
    capacity, or copying a fraction."""
    from distlab.hardware.gpus import gpu

    small = job_memory(_job(micro_batch=1))
    assert small["capacity"] == 81559 * 2**20
    assert small["usable"] == pytest.approx(0.95 * 81559 * 2**20 - 723 * 2**20, rel=1e-12)
    assert small["usable"] == planner_config.usable_bytes(gpu("H100-SXM"))
    assert small["reserved"] == small["capacity"] - small["usable"]
    b = next(b for b in range(1, 9) if job_memory(_job(micro_batch=b))["total"] > small["usable"])
    between = job_memory(_job(micro_batch=b))
    assert not between["fits"] and between["total"] > small["usable"]
    assert site_data()["usable_bytes"]["H100-SXM"] == small["usable"]


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"gpus": 6, "tp": 4}, "multiple of TP x PP"),
        ({"pp": 3, "gpus": 3}, "split evenly"),
        ({"model": "13B", "tp": 3, "gpus": 3}, "divisible by TP"),
        ({"zero": 4}, "ZeRO stage"),
        ({"recompute": "some"}, "recompute"),
        ({"attention": "ring"}, "attention"),
        ({"precision": "fp8"}, "precision"),
        ({"gpu": "H900"}, "unknown GPU"),
        ({"seq": 0}, "seq must be"),
        ({"model": "3B"}, "unknown model preset"),
        ({"model": "70B", "tp": 8, "gpus": 8, "sequence_parallel": True, "seq": 4097}, "sequence"),
        ({"model": "Mixtral-8x7B", "capacity_factor": -1}, "capacity factor"),
    ],
)
def test_bad_inputs_are_refused_with_a_message(bad, message):
    """The page shows a refusal, never a wrong number, for these; distlab must refuse them too."""
    out = evaluate(DEFAULTS | bad)
    assert message in out["error"]


def test_vectors_are_stable_cover_every_preset_gpu_stage_and_both_verdicts():
    """The browser test is only as good as its vectors. Would catch vectors that change between two
    builds (a byte-unstable site) or that miss a preset, a GPU, a ZeRO stage, a precision, the flash switch
    on Llama, GPT and MoE presets, or a verdict."""
    first, second = vectors(), vectors()
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)
    data = site_data()
    ok = [v for v in first if "error" not in v["expected"]]
    assert {v["input"]["model"] for v in first} >= set(data["presets"]) | {"custom"}
    assert {v["input"]["gpu"] for v in first} >= set(data["gpus"])
    assert {v["input"]["zero"] for v in ok} == {0, 1, 2, 3}
    assert {v["input"]["precision"] for v in ok} == set(data["precisions"])
    for name in ("7B", "Llama-3-8B", "175B", "Mixtral-8x7B"):
        assert {v["input"]["attention"] for v in ok if v["input"]["model"] == name} == {"flash", "eager"}, name
    assert {v["expected"]["fits"] for v in ok} == {True, False}
    assert {v["expected"]["stage"] for v in ok} == {"only", "first", "last"}
    assert len(first) - len(ok) >= 5


def _assets_module(monkeypatch):
    """gen/assets.py's check functions, without mkdocs (its module body writes files through mkdocs_gen_files)."""
    monkeypatch.setitem(sys.modules, "mkdocs_gen_files", types.SimpleNamespace(open=None))
    source = (REPO / "gen" / "assets.py").read_text()
    source = source[: source.index("# What assets/calculator.js reads")]
    module = types.ModuleType("distlab_gen_assets")
    module.__file__ = str(REPO / "gen" / "assets.py")
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_javascript_agrees_under_node_and_a_planted_error_is_named(monkeypatch, tmp_path):
    """The build's own check: calculator.js under Node on every vector. A planted error (the log-sum-exp counted
    in 2 bytes instead of 4) must fail it, naming the vector, both values and the tolerance."""
    assets = _assets_module(monkeypatch)
    data, vecs = site_data(), vectors()
    assets.check_javascript(data, vecs)  # passes
    planted = tmp_path / "calculator.js"
    text = (REPO / "docs" / "assets" / "calculator.js").read_text()
    assert "total += STAT * b * heads * s;" in text
    planted.write_text(text.replace("total += STAT * b * heads * s;", "total += ACT * b * heads * s;"))
    monkeypatch.setattr(assets, "SCRIPT", planted)
    with pytest.raises(Exception, match=r"vector \d+ .*activations: JavaScript \d+, distlab \d+ \(tolerance 1e-12"):
        assets.check_javascript(data, vecs)


def test_disagreements_name_refusals_and_texts(monkeypatch):
    """The comparison itself, on hand-made answers: a refusal where distlab computes, and a text that differs."""
    assets = _assets_module(monkeypatch)
    vec = {"input": {"model": "7B"}, "expected": evaluate(DEFAULTS)}
    wrong_text = {"values": dict(vec["expected"]), "display": dict(vec["expected"]["display"], total="1 B")}
    bad = assets.disagreements([vec, vec], [{"error": "no"}, wrong_text])
    assert "JavaScript 'no'" in bad[0] and "total text: JavaScript '1 B'" in bad[1]
