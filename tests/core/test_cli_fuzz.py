"""The CLI's contract on bad input: exit 2, one line on stderr naming what is wrong, never a traceback.

Every subcommand gets malformed values of the kinds a user types by accident or a script passes by mistake:
negative and zero counts, infinities and NaN, numbers too large to mean anything (1e308, 1e30 GPUs),
non-ASCII digits ('٧', fullwidth '７'), words, fractions where a count is needed, unknown choices and options.
Would catch a calculator that answers with inf or nan, prints Infinity in JSON, accepts a million-times-too-many
GPUs, or lets an OverflowError or numpy warning escape as a traceback.
"""

from __future__ import annotations

import pytest

from distlab.core.cli import main

MEMORY = ["--params", "7e9", "--gpus", "8", "--zero", "3"]
ACTIVATIONS = ["--layers", "32", "--hidden", "4096", "--heads", "32", "--seq", "4096", "--batch", "1"]
ALLREDUCE = ["--ranks", "8", "--bytes", "1e9"]
PIPELINE = ["--stages", "4", "--microbatches", "16"]
MFU = ["--params", "7e9", "--tokens-per-second", "3000", "--gpus", "1", "--gpu", "H100-SXM"]
CHECKPOINT = ["--save-seconds", "60", "--mtbf-hours", "3"]
PLAN = ["--model", "7B", "--gpu", "H100-SXM", "--nodes", "1"]
SCALING = ["--flops", "1e23"]

BAD_NUMBERS = ["-7e9", "0", "inf", "-inf", "nan", "1e308", "٧", "７", "seven", "", "1e"]


def with_value(args: list[str], flag: str, value: str) -> list[str]:
    out = list(args)
    if flag in out:
        out[out.index(flag) + 1] = value
    else:
        out += [flag, value]
    return out


CASES: list[tuple[str, list[str]]] = []
for flag in ("--params", "--gpus"):
    CASES += [("memory", with_value(MEMORY, flag, v)) for v in BAD_NUMBERS]
CASES += [
    ("memory", with_value(MEMORY, "--gpus", "1e30")),
    ("memory", with_value(MEMORY, "--zero", "4")),
    ("memory", with_value(MEMORY, "--gpus", "2.5")),
    ("memory", with_value(MEMORY, "--precision", "fp64")),
    ("memory", with_value(MEMORY, "--zero", "1") + ["--offload-params"]),
]
for flag in ("--seq", "--hidden", "--batch", "--tp"):
    CASES += [("activations", with_value(ACTIVATIONS, flag, v)) for v in ("-1", "0", "inf", "1e308", "４")]
CASES += [
    ("activations", with_value(ACTIVATIONS, "--heads", "3")),
    ("activations", with_value(ACTIVATIONS, "--recompute", "some")),
]
# The architecture flags (issue 19): every numeric one malformed, every choice unknown, and shapes that cannot be.
MODEL_70B = ["--model", "70B", "--attention", "flash"]
for flag in ("--kv-heads", "--ffn", "--experts", "--top-k"):
    CASES += [("activations", MODEL_70B + [flag, v]) for v in ("-1", "0", "inf", "1e308", "٧", "2.5")]
CASES += [("activations", MODEL_70B + ["--capacity-factor", v]) for v in ("-1", "0", "inf", "nan", "1e308", "١")]
CASES += [
    ("activations", with_value(MODEL_70B, "--model", "7Q")),
    ("activations", with_value(MODEL_70B, "--attention", "ring")),
    ("activations", MODEL_70B + ["--mlp", "relu"]),
    ("activations", MODEL_70B + ["--norm", "batchnorm"]),
    ("activations", MODEL_70B + ["--kv-heads", "7"]),  # 64 heads are not divisible by 7 KV heads
    ("activations", MODEL_70B + ["--tp", "3"]),  # 64 heads do not split over 3 ranks
    ("activations", MODEL_70B + ["--ffn", "1001", "--tp", "2"]),  # the MLP width does not split over 2
    ("activations", MODEL_70B + ["--tp", "8", "--sequence-parallel", "--seq", "4097"]),  # nor does the sequence
    ("activations", MODEL_70B + ["--experts", "4", "--top-k", "5"]),  # top-k beyond the experts
    ("activations", with_value(ACTIVATIONS, "--experts", "4")),  # experts without --top-k
    ("activations", ["--hidden", "4096", "--heads", "32", "--seq", "4096"]),  # neither --model nor --layers
    ("activations", ["--layers", "32", "--hidden", "4096", "--heads", "32"]),  # no --seq and no --model
    ("activations", MODEL_70B + ["--dropout", "yes"]),  # --dropout takes no value
]
for flag in ("--ranks", "--bytes"):
    CASES += [("allreduce", with_value(ALLREDUCE, flag, v)) for v in ("-8", "0", "nan", "1e308", "1.5")]
CASES += [("allreduce", ALLREDUCE + ["--algorithm", "butterfly"]), ("allreduce", ALLREDUCE + ["--latency", "-1"])]
for flag in ("--stages", "--microbatches", "--backward", "--p2p"):
    CASES += [("pipeline", with_value(PIPELINE, flag, v)) for v in ("-2", "inf", "nan", "1e308")]
CASES += [("pipeline", PIPELINE + ["--schedule", "zigzag"]), ("pipeline", PIPELINE + ["--virtual", "2"])]
# per-stage times (the Plan page's timeline): each entry checked, one per stage, and --timeline's size bound
STAGE_TIMES = ["1,-1,1,1", "1,inf,1,1", "1,nan,1,1", "1,1e308,1,1", "1,,1,1", "1,٣,1,1", "1,1,1", "1,1,1,1,1", "1;1"]
for value in STAGE_TIMES:
    CASES += [("pipeline", with_value(PIPELINE, flag, value)) for flag in ("--forward", "--backward")]
CASES += [
    ("pipeline", PIPELINE + ["--forward", "0"]),
    ("pipeline", PIPELINE + ["--timeline=yes"]),
    ("pipeline", ["--stages", "64", "--microbatches", "4096", "--timeline", "--json"]),  # 524,288 ops to print
]
for flag in ("--params", "--tokens-per-second", "--gpus"):
    CASES += [("mfu", with_value(MFU, flag, v)) for v in ("-1", "inf", "1e308", "٣")]
CASES += [("mfu", with_value(MFU, "--gpu", "TPU-v9"))]
for flag in ("--save-seconds", "--mtbf-hours", "--restart-seconds"):
    CASES += [("checkpoint-interval", with_value(CHECKPOINT, flag, v)) for v in ("-60", "inf", "nan", "1e308")]
for flag in ("--nodes", "--gpus-per-node", "--seq", "--top"):
    CASES += [("plan", with_value(PLAN, flag, v)) for v in ("-1", "0", "inf", "1e30")]
CASES += [
    ("plan", with_value(PLAN, "--model", "7Q")),
    ("plan", with_value(PLAN, "--gpu", "H900")),
    ("plan", PLAN + ["--inter-bw", "inf"]),
    ("plan", PLAN + ["--inter-bw", "-5"]),
    ("plan", PLAN + ["--inter-bw", "nan"]),
]
for value in ("-1e23", "0", "inf", "nan", "1e308", "１e23"):
    CASES.append(("scaling", with_value(SCALING, "--flops", value)))
CASES += [
    ("scaling", SCALING + ["--mfu", "1.5"]),
    ("scaling", SCALING + ["--mfu", "-0.4"]),
    ("scaling", SCALING + ["--gpu", "abacus"]),
]
for value in ("-2.5", "0", "inf", "nan", "1e308", "two dollars", "٣"):
    CASES.append(("scaling", SCALING + ["--price-per-gpu-hour", value]))
# distlab plan's layout flags (issue 14): counts, choices, and layouts that cannot run
for flag in ("--tp", "--pp", "--dp", "--cp", "--ep", "--micro-batch", "--virtual", "--nics-per-node"):
    CASES += [("plan", with_value(PLAN, flag, v)) for v in ("-1", "0", "inf", "nan", "1e30", "2.5", "٣")]
# the headroom rule and the stacks (issue 25)
for value in ("-0.1", "1", "1.5", "inf", "nan", "eight", "٣"):
    CASES.append(("plan", PLAN + ["--min-headroom", value]))
CASES += [("plan", PLAN + ["--framework", "jax"]), ("plan", PLAN + ["--framework", "deepspeed", "--tp-overlap"])]
CASES += [
    ("plan", PLAN + ["--zero", "4"]),
    ("plan", PLAN + ["--recompute", "some"]),
    ("plan", PLAN + ["--schedule", "gpipe"]),
    ("plan", PLAN + ["--offload", "disk"]),
    ("plan", PLAN + ["--precision", "fp64"]),
    ("plan", PLAN + ["--matmul-dtype", "int4"]),
    ("plan", PLAN + ["--tp", "3"]),  # does not divide the heads
    ("plan", PLAN + ["--tp", "16"]),  # more than the GPUs
    ("plan", PLAN + ["--dp", "3"]),  # does not tile 8 GPUs
    (
        "plan",
        PLAN + ["--pp", "2", "--schedule", "interleaved", "--virtual", "17"],
    ),  # 34 chunks for 32 layers
    ("plan", PLAN + ["--pp", "1", "--schedule", "zb-h1"]),
    ("plan", PLAN + ["--zero", "0", "--offload", "optimizer"]),
    ("plan", PLAN + ["--tp", "1", "--pp", "1", "--zero", "0", "--offload", "none", "--micro-batch", "64"]),
    ("plan", PLAN + ["--ep", "2"]),  # a dense model has no experts
    ("plan", PLAN + ["--dropout", "--no-dropout", "--tp", "0"]),
    ("plan", PLAN + ["--sequence-parallel", "yes"]),
]
# hybrid sharding, NVLink domains, the fabric's taper, MoE sizes (issue 33)
for flag in ("--dp-shard", "--dp-replicate", "--nvlink-domain"):
    CASES += [("plan", with_value(PLAN, flag, v)) for v in ("-1", "0", "inf", "nan", "1e30", "2.5", "٣")]
for value in ("0.5", "0", "-2", "inf", "nan", "65", "two"):
    CASES.append(("plan", PLAN + ["--oversubscription", value]))
CASES += [
    ("plan", PLAN + ["--dp-shard", "3"]),  # does not divide DP 8
    ("plan", PLAN + ["--tp", "1", "--pp", "1", "--dp-shard", "3", "--dp-replicate", "2"]),  # 6 is not DP 8
    ("plan", PLAN + ["--dp-shard", "4", "--dp-replicate", "2", "--dp", "4"]),  # 8 is not --dp 4
    ("plan", PLAN + ["--dp-replicate", "2", "--zero", "0"]),  # HSDP shards: DDP cannot
    ("plan", PLAN + ["--nvlink-domain", "16"]),  # does not divide 8 GPUs
    ("plan", PLAN + ["--nvlink-domain", "12", "--nodes", "3"]),  # not a whole number of 8-GPU nodes
    ("plan", ["--model", "Mixtral-8x7B", "--nodes", "2", "--ep", "3"]),  # does not divide the 8 experts
    ("plan", ["--model", "7B", "--gpus", "12"]),  # not a whole number of 8-GPU nodes
    ("plan", ["--model", "7B", "--gpus", "64", "--nodes", "4"]),  # 64 GPUs are 8 nodes of 8
    ("plan", ["--model", "7B", "--gpus-per", "8"]),  # abbreviations are refused, not guessed
    ("memory", ["--params", "7e9", "--gpu", "8", "--zero", "3"]),  # --gpu is not --gpus
]
CASES += [
    ("run", ["no-such-experiment"]),
    ("run", ["adamw-bytes", "--device", "tpu"]),
    ("run", []),
    ("gpus", ["--bogus"]),
    ("list", ["extra"]),
    ("memory", ["--params"]),
    ("trace", []),
    ("trace", ["no-such-trace.json"]),
    ("trace", ["--record-demo", "bogus", "--out", "x"]),
    ("trace", ["--record-demo", "healthy"]),  # no --out
    ("trace", ["--out", "x"]),
]
# kv-cache (issue 28): every numeric flag malformed, an unknown dtype or attention, flags of the other attention kind.
KV = ["--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--seq", "8192"]
for flag in ("--layers", "--kv-heads", "--head-dim", "--seq", "--batch"):
    CASES += [("kv-cache", with_value(KV, flag, v)) for v in ("-1", "0", "inf", "nan", "1e308", "٧", "2.5", "x")]
CASES += [
    ("kv-cache", with_value(KV, "--dtype", "fp64")),
    ("kv-cache", with_value(KV, "--attention", "ring")),
    ("kv-cache", ["--layers", "32", "--seq", "8"]),
    ("kv-cache", ["--layers", "61", "--attention", "mla", "--seq", "8"]),
    ("kv-cache", KV + ["--attention", "mla", "--kv-lora-rank", "512"]),
    ("kv-cache", KV + ["--kv-lora-rank", "512"]),
    ("kv-cache", ["--layers", "61", "--attention", "mla", "--kv-lora-rank", "0", "--seq", "8"]),
]


def test_there_are_enough_cases_over_every_command():
    commands = {c for c, _ in CASES}
    assert len(CASES) >= 80
    assert commands >= {
        "memory",
        "activations",
        "allreduce",
        "pipeline",
        "mfu",
        "checkpoint-interval",
        "plan",
        "scaling",
        "run",
        "gpus",
        "list",
    }


@pytest.mark.parametrize(("command", "args"), CASES, ids=[f"{c} {' '.join(a)}" for c, a in CASES])
def test_bad_input_exits_2_with_one_line(command, args, capsys):
    code = main([command, *args])
    out, err = capsys.readouterr()
    assert code == 2, f"exit {code}; stdout {out[-300:]!r}; stderr {err[-300:]!r}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err and lines[0].startswith("distlab"), err
    assert "Infinity" not in out and "NaN" not in out
