"""Per-GPU model-state memory and traffic for DDP / ZeRO 1-3, against published tables and closed forms.

Independent references: the ZeRO paper's Figure 1 (7.5B parameters, 64 GPUs, K = 12), the ZeRO-Offload
paper's Figure 2 (GPU 2M, CPU 2M + 12M), Megatron-LM's distributed-optimizer table (18 and 6 + 12/d),
DeepSpeed's estimators (ZeRO-2: 4 + 16/N; ZeRO-3: 18/N) and nccl-tests' ring factors (distlab.hardware.collectives,
written by another chapter). All values are exact integers except where a division makes them fractions.
"""

import json
import subprocess
import sys

import pytest

from distlab.hardware.collectives import steps_and_factor
from distlab.sharding.zero import conventions, model_state_bytes_per_gpu, shard_elements, traffic_bytes_per_gpu


@pytest.mark.parametrize(("zero", "published_gb"), [(0, 120), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_figure_1(zero, published_gb):
    """ZeRO paper Fig. 1: Ψ = 7.5B, N_d = 64, K = 12; published to 0.1 GB. Would catch a stage sharding the
    wrong state (ZeRO-1 sharding gradients would give 16.6 for stage 1)."""
    total = model_state_bytes_per_gpu(7_500_000_000, 64, zero)["total_bytes"]
    assert round(total / 1e9, 1) == published_gb


def test_per_state_breakdown_7b_on_8():
    """Llama 2 7B on 8 GPUs, written out by hand: 6,738,415,616 / 8 = 842,301,952 exactly."""
    n, s = 6_738_415_616, 842_301_952
    assert shard_elements(n, 8) == s
    z = {k: model_state_bytes_per_gpu(n, 8, k) for k in range(4)}
    assert (z[0]["params_bytes"], z[0]["grads_bytes"], z[0]["optimizer_bytes"]) == (2 * n, 2 * n, 12 * n)
    assert (z[1]["params_bytes"], z[1]["grads_bytes"], z[1]["optimizer_bytes"]) == (2 * n, 2 * n, 12 * s)
    assert (z[2]["params_bytes"], z[2]["grads_bytes"], z[2]["optimizer_bytes"]) == (2 * n, 2 * s, 12 * s)
    assert (z[3]["params_bytes"], z[3]["grads_bytes"], z[3]["optimizer_bytes"]) == (2 * s, 2 * s, 12 * s)
    for m in z.values():
        assert m["total_bytes"] == m["params_bytes"] + m["grads_bytes"] + m["optimizer_bytes"]
        assert m["host_bytes"] == 0
        assert all(isinstance(v, int) for v in m.values())


@pytest.mark.parametrize(("params", "gpus"), [(10, 3), (97, 8), (1000, 7), (5, 8), (1, 1)])
def test_uneven_sharding_rounds_up_and_pads_at_most_n_minus_1(params, gpus):
    """The rule: every rank holds ⌈Ψ/N⌉ elements. Would catch floor division (under-counting a rank, so the
    shards would not cover Ψ) or a float ratio that the JavaScript port could round differently."""
    shard = shard_elements(params, gpus)
    assert shard * gpus >= params and shard * gpus - params <= gpus - 1
    assert model_state_bytes_per_gpu(params, gpus, 3)["total_bytes"] == 16 * shard


def test_offload_matches_zero_offload_paper_figure_2():
    """One GPU, ZeRO-Offload: GPU keeps fp16 parameters (2M); CPU holds fp16 gradients (2M) and the fp32
    optimizer states (12M). Would catch gradients left on the GPU or dropped from the host."""
    m = model_state_bytes_per_gpu(1_000_003, 1, 2, offload_optimizer=True)
    assert m["total_bytes"] == 2 * 1_000_003
    assert (m["host_grads_bytes"], m["host_optimizer_bytes"], m["host_bytes"]) == (2_000_006, 12_000_036, 14_000_042)


def test_offload_with_eight_gpus_shards_the_host_copy():
    """ZeRO-2 offload on 8 GPUs: DeepSpeed's estimator also puts 2Ψ on each GPU; the host per GPU holds its
    shard. ZeRO-1 keeps its full gradient on the GPU; ZeRO-3 + params offload leaves nothing at rest."""
    n = 800_000_001
    s = shard_elements(n, 8)
    z2 = model_state_bytes_per_gpu(n, 8, 2, offload_optimizer=True)
    assert z2["total_bytes"] == 2 * n and z2["host_bytes"] == 14 * s
    z1 = model_state_bytes_per_gpu(n, 8, 1, offload_optimizer=True)
    assert (z1["params_bytes"], z1["grads_bytes"], z1["optimizer_bytes"]) == (2 * n, 2 * n, 0)
    z3 = model_state_bytes_per_gpu(n, 8, 3, offload_optimizer=True, offload_params=True)
    assert z3["total_bytes"] == 0 and z3["host_bytes"] == 16 * s
    z3p = model_state_bytes_per_gpu(n, 8, 3, offload_params=True)
    assert (z3p["params_bytes"], z3p["host_params_bytes"], z3p["total_bytes"]) == (0, 2 * s, 14 * s)


def test_fp32_convention():
    """Plain fp32 AdamW: 4 + 4 + 8 bytes per parameter (no master copy)."""
    m = model_state_bytes_per_gpu(101, 2, 1, precision="fp32")
    assert (m["params_bytes"], m["grads_bytes"], m["optimizer_bytes"]) == (404, 404, 8 * 51)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"zero": 0, "offload_optimizer": True}, "stage 1, 2 or 3"),
        ({"zero": 2, "offload_params": True}, "stage 3"),
        ({"zero": 4}, "zero must be"),
        ({"zero": 3, "offload_optimizer": True, "precision": "fp32"}, "mixed precision"),
        ({"zero": 1, "precision": "fp8"}, "precision"),
    ],
)
def test_invalid_configurations_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        model_state_bytes_per_gpu(1000, 4, **kwargs)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_bad_counts(bad):
    with pytest.raises(ValueError):
        model_state_bytes_per_gpu(bad, 4, 1)
    with pytest.raises(ValueError):
        traffic_bytes_per_gpu(1000, bad, 1)


def test_megatron_and_deepspeed_conventions():
    """Megatron-LM's table: bf16 params + fp32 grads = 18 (non-distributed), 6 + 12/d distributed;
    DeepSpeed's estimators: ZeRO-2 2 + 18/N since PR 5099 (4 + 16/N before it), ZeRO-3 18/N. Would catch a
    convention built from the wrong dtype sizes, or the stale ZeRO-2 estimate quoted as DeepSpeed's current one."""
    for d in (1, 3, 8, 64):
        got = {key: bpp for key, (_, _, bpp, _) in conventions(d).items()}
        assert got["zero_paper"] == 16 and got["megatron"] == 18
        assert got["megatron_distributed"] == pytest.approx(6 + 12 / d, rel=1e-15)
        assert got["deepspeed_zero2"] == pytest.approx(2 + 18 / d, rel=1e-15)
        assert got["deepspeed_zero2_old"] == pytest.approx(4 + 16 / d, rel=1e-15)
        assert got["deepspeed_zero3"] == pytest.approx(18 / d, rel=1e-15)


@pytest.mark.parametrize(("params", "gpus"), [(6_738_415_616, 8), (1000, 7), (97, 3), (12, 2)])
def test_traffic_matches_ring_factors(params, gpus):
    """Each collective moves nccl-tests' factor times its (padded) buffer: all-reduce 2(N-1)/N, all-gather
    and reduce-scatter (N-1)/N. Would catch a missing (N-1)/N or ZeRO-3 counting one all-gather."""
    padded = shard_elements(params, gpus) * gpus * 2  # bf16 buffer, padded to a multiple of N
    ar = steps_and_factor("all-reduce", gpus)[1] * padded
    ag = steps_and_factor("all-gather", gpus)[1] * padded
    rs = steps_and_factor("reduce-scatter", gpus)[1] * padded
    t = [traffic_bytes_per_gpu(params, gpus, z) for z in range(4)]
    assert t[0]["all_reduce_bytes"] == pytest.approx(ar, rel=1e-12) and t[0]["total_bytes"] == t[0]["all_reduce_bytes"]
    for z in (1, 2):
        assert t[z]["reduce_scatter_bytes"] == pytest.approx(rs, rel=1e-12)
        assert t[z]["all_gather_bytes"] == pytest.approx(ag, rel=1e-12)
        assert t[z]["total_bytes"] == t[0]["total_bytes"] and t[z]["volume_bytes"] == 2 * 2 * params
    assert t[3]["all_gather_bytes"] == pytest.approx(2 * ag, rel=1e-12)
    assert t[3]["total_bytes"] * 2 == t[0]["total_bytes"] * 3 and t[3]["volume_bytes"] == 3 * 2 * params


@pytest.mark.parametrize(("params", "gpus", "micro"), [(97, 3, 5), (1000, 7, 1), (6_738_415_616, 8, 8)])
def test_accumulation_traffic_per_micro_batch(params, gpus, micro):
    """With m accumulated micro-batches, ZeRO-1 still reduces once, ZeRO-2 reduce-scatters m times and ZeRO-3 runs
    its three phases m times: simulated here by summing the collectives one micro-batch at a time. Would catch the
    accumulation exception dropped (chapter 6's "stages 1 and 2 are free") or ZeRO-3 gathering once per step."""
    phase = traffic_bytes_per_gpu(params, gpus, 1)["reduce_scatter_bytes"]  # one ring phase, no accumulation
    per_micro = {0: 0, 1: 0, 2: phase, 3: 3 * phase}  # sent inside each micro-batch's forward + backward
    per_step = {0: 2 * phase, 1: 2 * phase, 2: phase, 3: 0}  # sent once, after the last micro-batch
    for z in range(4):
        total = sum(per_micro[z] for _ in range(micro)) + per_step[z]
        assert traffic_bytes_per_gpu(params, gpus, z, microbatches=micro)["total_bytes"] == total
    with pytest.raises(ValueError, match="microbatches"):
        traffic_bytes_per_gpu(params, gpus, 2, microbatches=0)


def test_traffic_one_gpu_is_zero_and_fp32_doubles():
    assert traffic_bytes_per_gpu(1000, 1, 3)["total_bytes"] == 0
    assert traffic_bytes_per_gpu(1000, 4, 2, 4)["total_bytes"] == 2 * traffic_bytes_per_gpu(1000, 4, 2)["total_bytes"]


def _cli(capsys, *args):
    """`distlab memory ARGS` in this process, through the CLI's entry point: (exit status, stdout, stderr)."""
    from distlab.core.cli import main

    status = main(["memory", *args])
    out = capsys.readouterr()
    return status, out.out, out.err


def test_memory_cli_json_and_text(capsys):
    """The JSON keys the planner and the calculator rely on, and the human text."""
    status, out, err = _cli(capsys, "--params", "7e9", "--gpus", "8", "--zero", "3", "--offload-optimizer", "--json")
    assert status == 0, err
    out = json.loads(out)
    assert {"params_bytes", "grads_bytes", "optimizer_bytes", "total_bytes", "host_bytes"} <= set(out)
    assert out["total_bytes"] == 2 * 875_000_000 and out["host_bytes"] == 14 * 875_000_000
    status, text, _ = _cli(capsys, "--params", "7_000_000_000", "--gpus", "8", "--zero", "1")
    assert status == 0 and "ZeRO-1" in text and "38.5 GB" in text  # 4·7e9 + 12·7e9/8


def test_memory_cli_as_installed_script():
    """End to end in a fresh interpreter, as the `distlab` script runs it."""
    code = "import sys; from distlab.core.cli import main; sys.exit(main())"
    proc = subprocess.run(
        [sys.executable, "-c", code, "memory", "--params", "1e9", "--gpus", "4", "--zero", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["total_bytes"] == 2 * 10**9 + 14 * 250_000_000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--params", "7e9", "--gpus", "8", "--zero", "5"], "invalid choice"),
        (["--params", "7e9", "--gpus", "0", "--zero", "1"], "must be positive"),
        (["--params", "7.5", "--gpus", "8", "--zero", "1"], "whole number"),
        (["--params", "7e9", "--gpus", "8", "--zero", "1", "--offload-params"], "stage 3"),
        (["--gpus", "8", "--zero", "1"], "required"),
    ],
)
def test_memory_cli_bad_input_is_one_line_exit_2(capsys, args, message):
    status, _, err = _cli(capsys, *args)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and message in lines[0] and "Traceback" not in err
