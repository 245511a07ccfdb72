"""distlab.memory.activations against independent references: the paper's terms written out by hand, Table 2 row by
row, a step-by-step simulation of checkpointed backward, and the `distlab activations` CLI."""

import json
import subprocess
import sys

import pytest

from distlab.memory.activations import (
    activation_bytes_per_layer,
    block_bytes,
    block_terms,
    published_bytes_per_layer,
    stack_peak_bytes,
)
from distlab.memory.activations_7b import activations_7b

SHAPES = [(2048, 1, 12288, 96), (4096, 8, 4096, 32), (97, 3, 60, 5), (1000, 2, 120, 8)]


@pytest.mark.parametrize(("s", "b", "h", "a"), SHAPES)
def test_published_formula_is_the_sum_of_section_4_1(s, b, h, a):
    """Would catch a typo in 34 or 5 (the paper's per-tensor list, Section 4.1, summed by hand here)."""
    sbh, as2b = s * b * h, a * s * s * b
    attention = 2 * sbh + 4 * sbh + 2 * as2b + as2b + 2 * as2b + 2 * sbh + 2 * sbh + sbh  # 11sbh + 5as²b
    mlp = 2 * sbh + 8 * sbh + 8 * sbh + sbh  # 19sbh
    norms = 4 * sbh
    assert published_bytes_per_layer(s, b, h, a) == pytest.approx(attention + mlp + norms, rel=1e-12)
    assert sum(t.paper_bytes for t in block_terms(s, b, h, a)) == attention + mlp + norms


@pytest.mark.parametrize(
    ("s", "b", "h", "a", "t"), [(s, b, h, a, t) for s, b, h, a in SHAPES for t in (1, 2, 4, 8) if a % t == 0]
)
def test_table_2_rows(s, b, h, a, t):
    """Each Table 2 row written out independently (Korthikanti et al. 2022); would catch a swapped /t."""
    sbh = s * b * h
    f = lambda **kw: activation_bytes_per_layer(s, b, h, a, tp=t, **kw)
    assert f() == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)), rel=1e-12)
    assert f(sequence_parallel=True) == pytest.approx(sbh / t * (34 + 5 * a * s / h), rel=1e-12)
    assert f(recompute="selective") == pytest.approx(sbh * (10 + 24 / t), rel=1e-12)
    assert f(recompute="selective", sequence_parallel=True) == pytest.approx(34 * sbh / t, rel=1e-12)
    assert f(recompute="full") == 2 * sbh


def test_gpt3_attention_share_is_the_papers():
    """The paper's running example: GPT-3 (a = 96, s = 2048, h = 12288) has 5as/h = 80, so selective
    recompute removes 80 / 114 of the activations."""
    s, h, a = 2048, 12288, 96
    full, selective = (activation_bytes_per_layer(s, 1, h, a, recompute=r) for r in ("none", "selective"))
    assert 5 * a * s / h == 80
    assert 1 - selective / full == pytest.approx(80 / 114, rel=1e-12)


@pytest.mark.parametrize(("s", "b", "h", "a"), [(97, 3, 60, 5), (257, 2, 96, 4)])
def test_our_block_differs_from_the_paper_by_mask_and_statistics_only(s, b, h, a):
    """Would catch a term counted in one column and not the other."""
    for k in (2, 4):
        ours = block_bytes(s, b, h, a, norm_stat_bytes=k)
        assert ours - (34 * s * b * h + 5 * a * s * s * b) == s * s + 2 * 2 * s * b * k
    no_dropout = block_bytes(s, b, h, a, dropout=False, norm_stat_bytes=0)
    assert no_dropout == 32 * s * b * h + 2 * a * s * s * b + s * s
    selective = block_bytes(s, b, h, a, recompute="selective", norm_stat_bytes=0)
    assert selective == 34 * s * b * h


def _simulate_peak(layers, segment, checkpointed, layer_bytes, input_bytes):
    """Walk the schedule event by event: forward, then backward segment by segment."""
    held, peak = 0, 0
    segments = [list(range(i, min(i + segment, checkpointed))) for i in range(0, checkpointed, segment)]
    held += len(segments) * input_bytes + (layers - checkpointed) * layer_bytes
    peak = held
    held -= (layers - checkpointed) * layer_bytes  # plain layers' backward releases their saves
    for seg in reversed(segments):
        held -= input_bytes  # unpacked by the checkpoint's backward
        for _ in seg:  # recompute, saving each layer
            held += layer_bytes
            peak = max(peak, held)
        held -= len(seg) * layer_bytes
    assert held == 0
    return peak


@pytest.mark.parametrize("layers", [1, 5, 16])
def test_stack_peak_matches_a_simulation(layers):
    """Would catch an off-by-one in the inputs still held while a segment is recomputed."""
    for segment in range(1, layers + 1):
        for checkpointed in range(0, layers + 1):
            expected = _simulate_peak(layers, segment, checkpointed, 37, 2) if checkpointed else layers * 37
            assert stack_peak_bytes(layers, segment, checkpointed, 37, 2) == expected


def test_bad_recompute_and_sizes():
    with pytest.raises(ValueError, match="recompute"):
        activation_bytes_per_layer(1, 1, 8, 2, recompute="some")
    with pytest.raises(ValueError, match="seq"):
        activation_bytes_per_layer(0, 1, 8, 2)
    with pytest.raises(ValueError, match="recompute"):
        block_bytes(4, 1, 8, 2, recompute="partial")


def test_seven_b_table_claims_pass():
    r = activations_7b("cpu")
    assert not r.failed_claims
    # Llama 2 7B, s = 4096, b = 1, no parallelism: 32 layers x sbh(34 + 5as/h) with 5as/h = 160.
    assert r.quantities["none_b1"].value == 32 * 4096 * 4096 * (34 + 160)
    assert r.quantities["full_b8"].value == 32 * 2 * 4096 * 8 * 4096


# ---------------------------------------------------------------- the CLI
def distlab(*args):
    """The console script's code path (`python -m distlab.core.cli` would register the command in a second copy
    of distlab.core.cli)."""
    code = "import sys; from distlab.core.cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, "activations", *args], capture_output=True, text=True, timeout=120
    )


def test_cli_json_keys_and_values():
    """Without --model the layer is Korthikanti et al.'s GPT block: the paper's Table 2 plus the four fp32
    LayerNorm statistics per row (16sb) the paper leaves out. Would catch the CLI losing the paper's value or a
    JSON key, or dividing the statistics wrongly under sequence parallelism."""
    base = ["--layers", "32", "--hidden", "4096", "--heads", "32", "--seq", "4096", "--batch", "2"]
    out = json.loads(distlab(*base, "--json").stdout)
    s, b, h = 4096, 2, 4096
    assert out["published_bytes_per_layer"] == s * b * h * (34 + 160)
    assert out["bytes_per_layer"] == s * b * h * (34 + 160) + 16 * s * b
    assert out["total_bytes"] == 32 * out["bytes_per_layer"]
    assert sum(x["bytes"] for x in out["terms"]) == out["bytes_per_layer"]
    out = json.loads(distlab(*base, "--tp", "8", "--sequence-parallel", "--recompute", "selective", "--json").stdout)
    assert out["bytes_per_layer"] == (34 * s * b * h + 16 * s * b) // 8
    assert out["published_bytes_per_layer"] == 34 * s * b * h // 8
    assert {"tp", "sequence_parallel", "recompute", "formula", "attention", "kv_heads", "mlp", "ffn"} <= set(out)
    assert isinstance(out["total_bytes"], int)


def test_cli_model_70b_flash_is_architecture_exact():
    """The issue's check: Llama 2 70B (SwiGLU f = 28672, 8 KV heads of 64, RMSNorm, no dropout) with
    FlashAttention, written out by hand: 12sbh + 4sbh·g/a + 8sbf + 4abs + 8sb. Would catch the GPT formula
    (34sbh) applied to Llama, GQA ignored, or the MLP width ignored."""
    out = json.loads(distlab("--model", "70B", "--attention", "flash", "--json").stdout)
    s, b, h, a, g, f = 4096, 1, 8192, 64, 8, 28672
    sbh = s * b * h
    assert out["bytes_per_layer"] == 12 * sbh + 4 * sbh * g // a + 8 * s * b * f + 4 * a * b * s + 8 * s * b
    assert out["total_bytes"] == 80 * out["bytes_per_layer"]
    assert (out["mlp"], out["kv_heads"], out["ffn"], out["dropout"], out["norm"]) == ("swiglu", 8, f, False, "rmsnorm")
    assert out["formula"] == "12sbh + 8sb + 4sbh·g/a + 4abs + 8sbf"


def test_cli_flags_override_the_named_model():
    """--model sets defaults; each flag overrides one. Would catch a flag silently ignored with --model."""
    base = ["--model", "7B", "--seq", "1000", "--json"]
    plain = json.loads(distlab(*base).stdout)["bytes_per_layer"]
    s, h, f = 1000, 4096, 11008
    assert plain == 16 * s * h + 8 * s * f + 4 * 32 * s + 8 * s  # MHA: 12sbh + 4sbh
    wider = json.loads(distlab(*base, "--ffn", str(4 * f)).stdout)["bytes_per_layer"]
    assert wider - plain == 8 * s * 3 * f  # quadrupling the MLP width moves only the 8sbf term
    gelu = json.loads(distlab(*base, "--mlp", "gelu").stdout)["bytes_per_layer"]
    assert plain - gelu == 4 * s * f
    gqa = json.loads(distlab(*base, "--kv-heads", "8").stdout)["bytes_per_layer"]
    assert plain - gqa == 4 * s * h - 4 * s * h * 8 // 32
    drop = json.loads(distlab(*base, "--dropout").stdout)["bytes_per_layer"]
    assert drop - plain == 2 * s * h  # two 1-byte masks; FlashAttention regenerates its own
    eager = json.loads(distlab(*base, "--attention", "eager").stdout)["bytes_per_layer"]
    assert eager - plain == 2 * 32 * s * s - 4 * 32 * s  # the scores in, the log-sum-exp out (MHA: Q, K, V, O alike)
    gpt3 = json.loads(distlab("--model", "175B", "--json").stdout)
    assert (gpt3["attention"], gpt3["dropout"], gpt3["seq"]) == ("eager", True, 2048)


def test_cli_moe_model_counts_k_experts_per_token():
    """Mixtral 8x7B, dropless, s = 32768: the experts process N = sbk slots. Would catch an MoE layer sized
    as one dense MLP."""
    out = json.loads(distlab("--model", "Mixtral-8x7B", "--seq", "4096", "--json").stdout)
    s, h, f, k, a, g = 4096, 4096, 14336, 2, 32, 8
    n = s * k
    attention = 12 * s * h + 4 * s * h * g // a + 4 * a * s + 8 * s
    assert out["bytes_per_layer"] == attention + 12 * s * k + 18 * n + 4 * n * h + 8 * n * f
    capped = json.loads(
        distlab("--model", "Mixtral-8x7B", "--seq", "4096", "--capacity-factor", "1.5", "--json").stdout
    )
    slots = 8 * -(-int(1.5 * s * k) // 8)
    assert capped["bytes_per_layer"] - out["bytes_per_layer"] == (slots - n) * (18 + 4 * h + 8 * f)


def test_cli_text_and_help_state_the_convention():
    proc = distlab("--help")
    assert proc.returncode == 0 and "16-bit activations" in proc.stdout and "dropout" in proc.stdout
    assert "Architecture-exact" in proc.stdout and "--kv-heads" in proc.stdout
    proc = distlab("--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "97", "--batch", "3")
    assert proc.returncode == 0 and "per GPU" in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--layers", "0"], "must be positive"),
        (["--heads", "3"], "divisible by --heads"),
        (["--tp", "3"], "divisible by --tp"),
        (["--recompute", "partial"], "invalid choice"),
        (["--seq", "1.5"], "whole number"),
        (["--model", "7Q"], "invalid choice"),
        (["--kv-heads", "3"], "not divisible by kv_heads"),
        (["--mlp", "relu"], "invalid choice"),
        (["--attention", "ring"], "invalid choice"),
        (["--capacity-factor", "0"], "must be positive"),
        (["--experts", "4"], "needs --top-k"),
        (["--ffn", "7", "--tp", "2", "--heads", "4"], "divisible by TP"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(args, message):
    base = {"--layers": "2", "--hidden": "64", "--heads": "4", "--seq": "16", "--batch": "1"}
    argv = []
    for k, v in base.items():
        argv += [k, v]
    argv += args
    proc = distlab(*argv)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0] and "Traceback" not in proc.stderr
