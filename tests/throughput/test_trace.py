"""`distlab trace` (distlab.throughput.trace_*): the streaming reader, the per-step breakdown against closed forms of
synthetic CUDA-shaped traces, HTA's figures against HTA 0.5.0's own output, the interval arithmetic against a naive
raster, NCCL logs and nccl-tests tables, and the command's refusals. Synthetic traces only: seconds, no torch."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys

import pytest

from distlab.core.cli import main
from distlab.core.facts import entries
from distlab.throughput import trace_read
from distlab.throughput.trace_diagnose import CAUSE_KEYS, diagnose
from distlab.throughput.trace_hta import comm_comp_overlap, temporal_breakdown
from distlab.throughput.trace_hta_agreement import HTA_0_5_0, recipe
from distlab.throughput.trace_intervals import intersect, length, subtract, union
from distlab.throughput.trace_nccl import read_nccl_log, read_nccl_tests
from distlab.throughput.trace_read import TraceError, read_trace
from distlab.throughput.trace_synthetic import Recipe, write

# Three ranks, awkward sizes, rank r's kernels 10 r µs longer (rank 2 is the straggler); HTA_0_5_0 is what
# HolisticTraceAnalysis 0.5.0 printed for exactly these files (the experiment trace-hta-agreement shows both).
awkward_recipe = recipe


@pytest.fixture(scope="module")
def awkward(tmp_path_factory):
    d = tmp_path_factory.mktemp("awkward")
    paths = []
    for r in range(3):
        paths.append(str(d / f"syn-rank{r}.json.gz"))
        write(paths[-1], awkward_recipe(r))
    return paths


def test_reader_streams_the_same_events_as_json_load_at_any_chunk_size(awkward, tmp_path, monkeypatch):
    """The sliding-buffer decoder against json.load, with chunks of 7 characters (every value split across reads).
    Would catch a number cut at a chunk boundary ("25" read as "2"), a lost event at a boundary, or metadata after
    traceEvents dropped."""
    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress(open(awkward[1], "rb").read()))
    events = json.loads(plain.read_text())["traceEvents"]
    want = sorted((float(e["ts"]), float(e["ts"] + e["dur"]), e["cat"], e["name"]) for e in events)
    for chunk in (7, 1 << 20):
        monkeypatch.setattr(trace_read, "CHUNK_CHARS", chunk)
        for path in (str(plain), awkward[1]):
            t = read_trace(path)
            assert [e[:4] for e in t.events] == want
            assert (t.rank, t.world_size, t.backend, t.gpus) == (1, 3, "nccl", 1)
    array = tmp_path / "array.json"  # Chrome's "JSON Array Format": no metadata, events only
    array.write_text(json.dumps(events))
    assert [e[:4] for e in read_trace(str(array)).events] == want


def test_breakdown_matches_the_recipe_closed_forms(awkward):
    """Per step and rank, compute, exposed communication, data wait and launch gaps equal the recipe's closed forms
    to the microsecond, and the causes add up to the step. Would catch overlapped communication counted as exposed,
    the idle tail lost, or the DataLoader's wait counted twice."""
    d = diagnose([read_trace(p) for p in awkward])
    assert [row["rank"] for row in d["ranks"]] == [0, 1, 2] and len(d["steps"]) == 5
    for r, row in enumerate(d["ranks"]):
        e = awkward_recipe(r).expected()
        got = row["time_by_cause"]
        assert got["compute"] == pytest.approx(e["compute"] * 1e-6, abs=1e-9)
        assert got["communication_exposed"] == pytest.approx(e["exposed"] * 1e-6, abs=1e-9)
        assert got["data_loading"] == pytest.approx(e["data"] * 1e-6, abs=1e-9)
        assert got["launch_overhead"] == pytest.approx(e["launch_gaps"] * 1e-6, abs=1e-9)
        assert row["overlapped_communication_s"] == pytest.approx(e["overlapped"] * 1e-6, abs=1e-9)
        assert row["step_s"] == pytest.approx(e["step"] * 1e-6, abs=1e-9)
        assert sum(got.values()) == pytest.approx(row["step_s"], rel=1e-12)
        assert row["gpu_idle_s"] == pytest.approx((e["data"] + e["launch_gaps"]) * 1e-6, abs=1e-9)
    assert d["straggler_rank"] == 2
    t = diagnose([read_trace(p) for p in awkward], with_timeline=True)["timeline"]  # what the Trace page draws
    for r in range(3):
        drawn = sum(b - a for rank, a, b, _ in t["pieces"] if rank == r)
        assert drawn == pytest.approx(awkward_recipe(r).expected()["step"] * 1e-6, abs=1e-9)
    # rank 2's own work minus the median of ranks 0 and 1 (97 kernels x 20 µs and x 10 µs more): 97 x 15 µs
    assert d["straggler_excess_s"] == pytest.approx(97 * 15e-6, rel=1e-9)
    assert d["top_cause"] == "healthy"
    assert {m["cause"] for m in d["missing"]} == {"optimizer"}  # a GPU trace with every other cause's events


def test_hta_figures_agree_with_hta_0_5_0(awkward):
    """Temporal breakdown (idle, compute, non-compute, kernel time) and communication/computation overlap with HTA's
    definitions, against what HTA 0.5.0 itself printed for these files: exact in µs, overlap to HTA's 2 decimals.
    Would catch the last step not dropped as HTA does, Memcpy counted as compute, or overlap over the union wrong."""
    for r, path in enumerate(awkward):
        t = read_trace(path)
        b = temporal_breakdown(t)
        idle, compute, non_compute, kernel, overlap_pct = HTA_0_5_0[r]
        assert (b["idle_us"], b["compute_us"], b["non_compute_us"], b["kernel_us"]) == (
            idle,
            compute,
            non_compute,
            kernel,
        )
        assert 100 * comm_comp_overlap(t) == pytest.approx(overlap_pct, abs=0.005)


def raster(ranges, lo, hi):
    return {t for a, b in ranges for t in range(max(a, lo), min(b, hi))}


def test_interval_arithmetic_against_a_raster():
    """union, intersect, subtract and length on random integer ranges (touching, nested, empty) against sets of
    integer points. Would catch a merge that drops a nested range or a subtract that keeps a touching edge."""
    rng = random.Random(97)
    for _ in range(300):
        xs = [(a, a + rng.randint(0, 9)) for a in (rng.randint(0, 60) for _ in range(rng.randint(0, 7)))]
        ys = [(a, a + rng.randint(0, 9)) for a in (rng.randint(0, 60) for _ in range(rng.randint(0, 7)))]
        ux, uy = union(xs), union(ys)
        assert length(ux) == len(raster(xs, 0, 100))
        assert length(intersect(ux, uy)) == len(raster(xs, 0, 100) & raster(ys, 0, 100))
        assert length(subtract(ux, uy)) == len(raster(xs, 0, 100) - raster(ys, 0, 100))
        assert all(a < b for a, b in ux) and all(ux[i][1] < ux[i + 1][0] for i in range(len(ux) - 1))


def test_a_cpu_trace_and_a_single_rank_say_what_they_cannot_tell(tmp_path):
    """A gloo-style CPU trace (no kernels) without DataLoader ranges, one rank: the report names GPU idle,
    stragglers and data loading as not measurable instead of reporting zeros as findings. Would catch a reader that
    guesses."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 700},
        {"ph": "X", "cat": "cpu_op", "name": "gloo:all_reduce", "pid": 1, "tid": 9, "ts": 600, "dur": 300},
    ]
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({"traceEvents": events}))
    d = diagnose([read_trace(str(path))])
    assert {m["cause"] for m in d["missing"]} >= {"gpu-idle", "straggler", "slow-dataloader"}
    assert d["device"] == "cpu" and d["straggler_rank"] is None
    got = d["ranks"][0]["time_by_cause"]
    assert got["compute"] == pytest.approx(700e-6) and got["communication_exposed"] == pytest.approx(190e-6)
    assert d["ranks"][0]["overlapped_communication_s"] == pytest.approx(110e-6)
    assert not [c for c in d["causes"] if c["cause"] == "straggler"][0]["measurable"]


def nccl_tests_text(name: str, busbw_scale: float = 1.0) -> str:
    """The published sweep `name` (nccl_tests.toml) printed in nccl-tests' layout, one '#  Rank' line per rank."""
    s = entries("nccl_tests")[name]
    head = ["# nThread 1 nGpus 1 minBytes 8 maxBytes 17179869184 step: 2(factor)", "#"]
    head += [f"#  Rank {r:2d} Group  0 Pid  1 on host device  {r} [0x1a] GPU" for r in range(s["ranks"])]
    head += ["#       size         count      type   redop    root     time   algbw   busbw #wrong"]
    rows = [
        f"{b:12d} {b // 4:12d}     float     sum      -1 {t:8.2f} {a:7.2f} {bus * busbw_scale:7.2f}      0"
        for b, t, a, bus in zip(s["bytes"], s["time_us"], s["algbw_gbps"], s["busbw_gbps"])
    ]
    return "\n".join(["# Collective test starting: all_reduce_perf", *head, *rows, "# Avg bus bandwidth : 1"]) + "\n"


def test_nccl_tests_output_is_read_and_checked(tmp_path):
    """The published 8 x H100 all-reduce sweep, printed as nccl-tests prints it: every row read, no column
    disagreement, the peak busbw the data's maximum; with busbw scaled by 1.1 (a copy-paste from another run),
    the busbw = algbw x 2(n-1)/n check flags the rows. Would catch a wrong bus factor or a column read shifted."""
    good = tmp_path / "good.txt"
    good.write_text(nccl_tests_text("dgxc-h100-8gpu-all-reduce"))
    r = read_nccl_tests(str(good))
    s = entries("nccl_tests")["dgxc-h100-8gpu-all-reduce"]
    assert (r["collective"], r["ranks"], len(r["rows"])) == ("all-reduce", 8, len(s["bytes"]))
    assert r["peak_busbw_gbps"] == max(s["busbw_gbps"])
    assert r["problems"] == []
    bad = tmp_path / "bad.txt"
    bad.write_text(nccl_tests_text("dgxc-h100-8gpu-all-reduce", busbw_scale=1.1))
    assert sum("busbw" in p for p in read_nccl_tests(str(bad))["problems"]) >= 10


def test_nccl_debug_log_lines_are_recognised(tmp_path):
    """Every example line of nccl_debug.toml, in a log, is recognised as its own entry, with its meaning, and a plain
    socket line is not taken for GPUDirect RDMA; a WARN line is reported. Would catch a printf format turned into a
    pattern that matches nothing, or everything."""
    examples = {k: e["example"] for k, e in entries("nccl_debug").items() if k.startswith("log-") and "example" in e}
    log = tmp_path / "nccl.log"
    fragment = "host:1:2 [0] NCCL INFO Channel 00/0 : 1[1] -> 9[1] "  # an example given as a fragment, in a line
    lines = [x if "NCCL" in x else fragment + x.replace("<id>", "2") for x in examples.values()]
    log.write_text("\n".join(lines + ["host:1:2 [0] NCCL WARN NET/IB : Got completion with error"]))
    r = read_nccl_log(str(log))
    found = {f["what"] for f in r["findings"]}
    assert found == {k.removeprefix("log-") for k in examples}
    socket_only = tmp_path / "socket.log"
    socket_only.write_text(examples["log-channel-socket"].replace("03/0 : 15[7] -> 6[6]", "01/1 : 2[2] -> 9[1]"))
    assert {f["what"] for f in read_nccl_log(str(socket_only))["findings"]} == {"channel-socket", "channel-net"}
    assert r["version"] and r["warnings"] == ["NET/IB : Got completion with error"]


def test_json_report_keys_and_no_torch(awkward, tmp_path):
    """`distlab trace --json` carries the issue's keys, and the reader runs without torch (as on Pyodide): a fresh
    interpreter importing the command must not load torch or numpy."""
    code = (
        "import sys; from distlab.core.cli import main; rc = main(['trace', *sys.argv[1:], '--json']); "
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy')]; assert not heavy, heavy; "
        "sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code, *awkward], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert {"ranks", "steps", "time_by_cause", "exposed_communication_s", "straggler_rank", "top_cause"} <= set(report)
    assert set(report["time_by_cause"]) == set(CAUSE_KEYS)


def bad_inputs(tmp_path, awkward):
    not_json = tmp_path / "notes.json"
    not_json.write_text("{this is not json")
    no_steps = tmp_path / "nosteps.json"
    no_steps.write_text(
        json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5}]})
    )
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as f:  # a sparse 2 GiB file: the size is refused before a byte is read
        f.truncate(2 << 30)
    broken_gz = tmp_path / "broken.json.gz"
    broken_gz.write_bytes(gzip.compress(b'{"traceEvents": [' + b"1," * 1000)[:-20])
    other_world = tmp_path / "world4.json.gz"
    write(str(other_world), Recipe(rank=1, world_size=4))
    return [
        [str(not_json)],
        [str(no_steps)],
        [str(huge)],
        [str(broken_gz)],
        [awkward[0], awkward[0]],  # the same rank twice
        [awkward[0], str(other_world)],  # mismatched world sizes
        [str(tmp_path / "missing.json")],
        [],
    ]


def test_bad_input_is_one_line_and_exit_2(awkward, tmp_path, capsys):
    """Not JSON, no ProfilerStep, a 2 GiB file, a truncated gzip, one rank twice, two world sizes, a missing file,
    no file: exit 2 and one line, never a traceback. Would catch a reader that loads a 2 GiB file blindly or lets a
    JSONDecodeError escape."""
    for args in bad_inputs(tmp_path, awkward):
        code = main(["trace", *args])
        out, err = capsys.readouterr()
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1 and lines[0].startswith("distlab trace"), (args, code, err)


def test_reader_refuses_a_decompressed_bomb(tmp_path, monkeypatch):
    """A small gzip that inflates past the limit is refused while streaming. Would catch a limit on the file's size
    only (a 2 GB trace gzips to a few hundred MB)."""
    monkeypatch.setattr(trace_read, "MAX_TRACE_BYTES", 1 << 20)
    path = tmp_path / "bomb.json.gz"
    body = ",".join(['{"ph": "i", "name": "x", "ts": 1}'] * 100_000)
    path.write_bytes(gzip.compress(('{"traceEvents": [' + body + "]}").encode()))
    with pytest.raises(TraceError, match="decompression"):
        read_trace(str(path))


def test_record_demo_writes_one_trace_per_rank_and_reads_them(tmp_path, capsys):
    """`distlab trace --record-demo healthy --out DIR --json`: a real 2-rank gloo run under torch.profiler
    writes DIR/healthy-rank0.json and -rank1.json (rank and world size in them) and the report reads both.
    Would catch a recorder whose on_trace_ready writes nothing, or two ranks writing one file."""
    assert main(["trace", "--record-demo", "healthy", "--out", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["healthy-rank0.json", "healthy-rank1.json"]
    assert [r["rank"] for r in report["ranks"]] == [0, 1] and len(report["steps"]) >= 3
    assert read_trace(str(tmp_path / "healthy-rank1.json")).world_size == 2
