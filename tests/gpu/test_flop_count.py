"""FLOPs per token and MFU against hand arithmetic and PaLM's form; the flop counter on a real GPT against
an independent per-layer sum; the mfu and gpus commands' output and their bad-input handling."""

import json
import subprocess
import sys

import pytest

from distlab.gpu.flop_count import _ElementCounter, count_flops, matmul_params, non_matmul_closed_form
from distlab.gpu.flops import flops_per_token, hardware_flops_per_token, mfu, mfu_report, preset_matmul_params
from distlab.models.gpt import GPT, GPTConfig, param_count, random_batch
from distlab.models.shapes import preset

# Awkward on purpose: untied head, ffn not 4h, odd vocab and sequence, 3 heads of width 8.
AWKWARD = GPTConfig(vocab=97, seq=17, layers=3, hidden=24, heads=3, ffn=50, tie_embeddings=False)


def test_flops_per_token_palm_form():
    """PaLM Appendix B: 6N + 12 L H Q T. 7B-like numbers by hand: 6 x 7e9 = 4.2e10; 12 x 32 x 4096 x 4096."""
    assert flops_per_token(7e9) == 4.2e10
    assert flops_per_token(7e9, 32, 4096, 4096) == 4.2e10 + 6_442_450_944
    with pytest.raises(ValueError, match="all of layers, hidden and seq"):
        flops_per_token(7e9, layers=32)
    with pytest.raises(ValueError, match="params must be positive"):
        flops_per_token(0)
    assert hardware_flops_per_token(1e9, 2, 64, 128, "full") == pytest.approx(8e9 + 16 * 2 * 64 * 128)


def test_mfu_by_hand():
    """64,000 tokens/s x 46.9 GFLOP / (8 x 989 TFLOP/s) = 0.37937..."""
    assert mfu(64_000, 46.9e9, 8, 989e12) == pytest.approx(64_000 * 46.9e9 / (8 * 989e12), rel=1e-15)
    with pytest.raises(ValueError, match="gpus must be positive"):
        mfu(1, 1, 0, 1)
    rep = mfu_report(
        params=6.738415616e9, tokens_per_second=64_000, gpus=8, gpu_name="H100-SXM", layers=32, hidden=4096, seq=4096
    )
    per_token = 6 * 6.738415616e9 + 12 * 32 * 4096 * 4096
    assert rep["flops_per_token"] == pytest.approx(per_token)
    assert rep["mfu"] == pytest.approx(64_000 * per_token / (8 * 989e12))
    assert rep["warnings"] == []
    assert mfu_report(params=7e9, tokens_per_second=1e7, gpus=1, gpu_name="H100-SXM")["warnings"]


def _reference_forward_flops(cfg: GPTConfig, batch: int) -> tuple[int, int, int]:
    """Independent per-layer sum for one forward: (all matmuls, each block's last matmul, the head)."""
    t, h, f, d = batch * cfg.seq, cfg.hidden, cfg.ffn_width, cfg.hidden // cfg.heads
    linears = [(h, 3 * h), (h, h), (h, f), (f, h)]  # qkv, attention out, MLP up, MLP down
    per_block = sum(2 * t * i * o for i, o in linears)
    per_block += 2 * (2 * batch * cfg.heads * cfg.seq * cfg.seq * d)  # QK^T and PV, full s x s
    head = 2 * t * h * cfg.vocab
    return cfg.layers * per_block + head, cfg.layers * 2 * t * f * h, head


@pytest.mark.parametrize("cfg", [AWKWARD, GPTConfig()])
def test_flop_counter_matches_an_independent_count(cfg):
    """Forward + backward = 3 x forward (every matmul has a gradient for its input and its weight). Would
    catch a closed form that drops the attention matmuls or the output head."""
    batch = 2
    fwd, last, _ = _reference_forward_flops(cfg, batch)
    counted, _ = count_flops(cfg, batch)
    assert counted == 3 * fwd
    # PyTorch's non-reentrant checkpoint recomputes every block's forward but its last matmul
    recomputed, _ = count_flops(cfg, batch, recompute=True)
    blocks = fwd - _reference_forward_flops(cfg, batch)[2]
    assert recomputed == 3 * fwd + blocks - last


def test_estimate_minus_count_is_the_parameters_that_do_no_matmul():
    """Untied: the input embedding (97 x 24), positions (17 x 24), biases and norms do no matmul."""
    h, f, L, V, s = 24, 50, 3, 97, 17
    biases_norms = L * (3 * h + h + f + h + 4 * h) + 2 * h
    assert param_count(AWKWARD) - matmul_params(AWKWARD) == V * h + s * h + biases_norms
    assert matmul_params(AWKWARD) == L * (4 * h * h + 2 * h * f) + V * h


def test_preset_matmul_params_llama2_7b():
    """Llama 2 7B: 6,738,415,616 parameters, of which the input embedding (32000 x 4096) and the RMSNorm
    weights (65 x 4096) do no matmul."""
    assert preset_matmul_params(preset("7B")) == 6_738_415_616 - 32000 * 4096 - 65 * 4096


def test_element_counter_groups():
    """Softmax writes B H s^2 elements per layer in the forward and as many in the backward; GELU B s f
    forward and backward. Would catch a grouping that counts views or misses a backward op."""
    import torch

    cfg, batch = AWKWARD, 2
    torch.manual_seed(0)
    model = GPT(cfg)
    x, y = random_batch(cfg, batch)
    counter = _ElementCounter()
    with counter:
        model(x, y).backward()
    assert counter.counts["attention softmax"] == 2 * cfg.layers * batch * cfg.heads * cfg.seq**2
    assert counter.counts["GELU"] == 2 * cfg.layers * batch * cfg.seq * cfg.ffn_width


def distlab(*args: str) -> subprocess.CompletedProcess:
    """The installed entry point's code path (`python -m distlab.core.cli` would register commands of other modules
    in a second copy of distlab.core.cli; the console script does not)."""
    code = "import sys; from distlab.core.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    from distlab.core.cli import main

    status = main(list(args))
    out = capsys.readouterr()
    return status, out.out, out.err


def test_mfu_command_json_and_text(capsys):
    proc = distlab(
        "mfu",
        "--params",
        "6.738415616e9",
        "--tokens-per-second",
        "64000",
        "--gpus",
        "8",
        "--gpu",
        "H100-SXM",
        "--layers",
        "32",
        "--hidden",
        "4096",
        "--seq",
        "4096",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    per_token = 6 * 6.738415616e9 + 12 * 32 * 4096 * 4096
    assert out["flops_per_token"] == pytest.approx(per_token)
    assert out["mfu"] == pytest.approx(64_000 * per_token / (8 * 989e12))
    assert {"mfu", "flops_per_token", "peak_flops_per_gpu", "gpu", "dtype"} <= set(out)
    text = run_cli(capsys, "mfu", "--params", "7e9", "--tokens-per-second", "8000", "--gpus", "1", "--gpu", "h200")[1]
    assert "MFU:" in text and "H200" in text and "no attention term" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--params", "7e9", "--tokens-per-second", "1", "--gpus", "0", "--gpu", "H100-SXM"], "must be positive"),
        (["--params", "abc", "--tokens-per-second", "1", "--gpus", "1", "--gpu", "H100-SXM"], "not a number"),
        (["--params", "7e9", "--tokens-per-second", "-5", "--gpus", "1", "--gpu", "H100-SXM"], "must be positive"),
        (["--params", "7e9", "--tokens-per-second", "1", "--gpus", "1", "--gpu", "Z100"], "known: A100-SXM-80GB"),
        (
            ["--params", "7e9", "--tokens-per-second", "1", "--gpus", "1", "--gpu", "H100-SXM", "--layers", "32"],
            "all of --layers, --hidden and --seq",
        ),
        (
            ["--params", "7e9", "--tokens-per-second", "1", "--gpus", "1", "--gpu", "A100-SXM-80GB", "--dtype", "fp8"],
            "no fp8",
        ),
    ],
)
def test_mfu_bad_input_is_one_line_exit_2(capsys, args, message):
    status, _, err = run_cli(capsys, "mfu", *args)
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in err


def test_gpus_command(capsys):
    listed = json.loads(run_cli(capsys, "gpus", "--json")[1])
    assert [g["name"] for g in listed] == ["A100-SXM-80GB", "H100-SXM", "H200", "B200", "GB200", "MI300X"]
    h100 = listed[1]
    assert h100["ridge"]["bf16"] == pytest.approx(989 / 3.35)
    assert "fp8" not in listed[0]["peak_flops"]
    text = run_cli(capsys, "gpus")[1]
    assert "MI300X" in text and "ridge" in text


def test_non_matmul_elements_by_hand():
    """The counter's elements by family against the op-by-op closed form, on an untied head with ffn not 4h and a
    batch of 3. Would catch an op counted twice or into the wrong family, or a term of the closed form dropped."""
    _, elements = count_flops(AWKWARD, 3)
    assert dict(elements) == non_matmul_closed_form(AWKWARD, 3)
