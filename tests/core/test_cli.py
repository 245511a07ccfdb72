"""The distlab CLI: bad input is one line and exit 2, never a traceback; --json is machine-readable."""

import json
import subprocess
import sys

import pytest


def distlab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "distlab", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "no-such-experiment"], "unknown experiment"),
        (["run", "adamw-bytes", "--device", "tpu"], "invalid choice"),
        (["run", "adamw-bytes", "--bogus"], "unrecognized arguments"),
        (["run"], "exactly one experiment"),
        (["frobnicate"], "unknown command"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    proc = distlab(*args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in proc.stderr


def test_cuda_without_gpu_exits_2():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    proc = distlab("run", "adamw-bytes", "--device", "cuda")
    assert proc.returncode == 2 and "no CUDA GPU" in proc.stderr and "Traceback" not in proc.stderr


def test_list_and_run_json():
    listed = json.loads(distlab("list", "--json").stdout)
    assert {"name": "adamw-bytes"}.items() <= next(e for e in listed if e["name"] == "adamw-bytes").items()
    proc = distlab("run", "adamw-bytes", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["quantities"]["mixed_bytes_per_param"]["value"] == 16
    assert all(c["passed"] for c in out["claims"])
    assert {"hardware", "torch", "code_version", "date"} <= set(out["provenance"])


def test_help_lists_commands():
    proc = distlab("--help")
    assert proc.returncode == 0 and "run" in proc.stdout and "list" in proc.stdout


@pytest.mark.parametrize("text", ["inf", "nan", "-3", "0", "abc", "1e400"])
def test_positive_rejects_non_finite_and_non_positive(text):
    """Would catch int(float('inf')) escaping as an OverflowError traceback."""
    import argparse

    from distlab.core.cli import positive

    for kind in (int, float):
        with pytest.raises(argparse.ArgumentTypeError):
            positive(kind)(text)
