"""The multi-process launcher: real gloo processes, failures named by rank, no orphans left.

Rank processes are not children of the test process (they come from a fork server), so every test that
checks for orphans has the ranks write their own pid to a file first and then checks those pids.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from distlab.runtime.launcher import LaunchError, launch

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def _warm_fork_server():
    """Start the fork server once, so that the deadlines below measure the ranks, not torch's import on
    a busy machine."""
    launch(_world_of_two, 1)


def _note_pid(folder: str, rank: int) -> None:
    Path(folder, f"{rank}.pid").write_text(str(os.getpid()))


def _sum_ranks(rank, world):
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    return t.item(), os.getpid(), dist.get_backend(), os.environ.get("DISTLAB_TEST_MARK")


def _raise_on_rank_1(rank, world, folder):
    _note_pid(folder, rank)
    if rank == 1:
        raise ValueError("deliberate")
    dist.barrier()


def _hang_on_last(rank, world, folder):
    _note_pid(folder, rank)
    if rank == world - 1:
        time.sleep(600)
    return rank


def _hang_while_peers_wait(rank, world, folder):
    """Rank 1 never joins the all-reduce; ranks 0 and 2 wait inside it (victims, not culprits)."""
    _note_pid(folder, rank)
    if rank == 1:
        time.sleep(600)
    dist.all_reduce(torch.ones(1))


def _kill_rank_0(rank, world, folder):
    _note_pid(folder, rank)
    if rank == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)


def _exit_quietly_on_rank_2(rank, world, folder):
    _note_pid(folder, rank)
    if rank == 2:
        os._exit(0)
    return rank


def _exit_in_collective_on_rank_1(rank, world):
    """Rank 1 leaves with os._exit(3) while its peers wait in an all-reduce: they then fail in gloo
    ("connection reset"), and those errors usually reach the launcher before rank 1's exit is seen."""
    if rank == 1:
        os._exit(3)
    dist.all_reduce(torch.ones(1))
    dist.all_reduce(torch.ones(1))
    return rank


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead: it only waits for its parent to collect it
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_all_dead(pids, seconds: float = 10.0) -> list[int]:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        alive = [p for p in pids if _alive(p)]
        if not alive:
            return []
        time.sleep(0.1)
    return alive


def _pids(folder: Path) -> list[int]:
    return [int(p.read_text()) for p in sorted(folder.glob("*.pid"))]


def test_all_reduce_on_three_real_processes_with_the_launch_time_environment(monkeypatch):
    """Would catch a wrong reduction, results out of rank order, ranks left running, or ranks that see the
    environment of the fork server's start instead of the launcher's environment at launch time."""
    monkeypatch.setenv("DISTLAB_TEST_MARK", "set-after-the-server-started")
    out = launch(_sum_ranks, 3)
    assert [v for v, *_ in out] == [6.0, 6.0, 6.0]  # 1 + 2 + 3 on every rank
    assert {b for _, _, b, _ in out} == {"gloo"}
    assert {m for *_, m in out} == {"set-after-the-server-started"}
    assert _wait_all_dead([pid for _, pid, _, _ in out]) == []


# What other ranks did after the first failure (their gloo errors once a peer vanished, which depend on how far each
# had got: under load a peer may still be inside init's connectFullMesh) may follow the first rank's message as one
# addendum; the message must still begin with the rank that failed first.
THEN = r"(?: \(then rank \d+: [^\n]+\))?$"

# Deadlines from what the work needs, with a stated margin. The launcher's deadline for fn starts once every rank is up,
# so start-up (0.1 s idle, 7-10 s for a world of 3 at load average 20, measured 2026-12-04) does not count: ranks that
# return at once have HANG_S = 8 s to deliver their results before the hung rank is named. A rank that fails or dies
# must be named by its news, not by the deadline: within FAIL_S = 60 s of a 120 s deadline, which covers a loaded
# start-up several times over.
HANG_S, FAIL_S, FAIL_DEADLINE_S = 8, 60, 120


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (_raise_on_rank_1, r"^rank 1 of 3 failed: ValueError: deliberate \(test_launcher\.py:\d+\)$"),
        (
            _hang_on_last,
            rf"^rank 2 of 3 hung: no result after {HANG_S} s, at test_launcher\.py:\d+ in _hang_on_last "
            r"\(ranks without a result: \[2\]\)$",
        ),
        (
            _hang_while_peers_wait,
            r"^rank 1 of 3 hung: .* in _hang_while_peers_wait \(ranks without a result: "
            r"\[0, 1, 2\]\)$",
        ),
        (_kill_rank_0, r"^rank 0 of 3 died with signal SIGKILL before returning a result" + THEN),
        (_exit_quietly_on_rank_2, r"^rank 2 of 3 exited with code 0 before returning a result" + THEN),
    ],
)
def test_failures_name_the_rank_in_one_line_and_leave_no_process(fn, message, tmp_path):
    """Would catch blaming a victim (a rank waiting in a collective) instead of the rank that hung, a
    multi-line message, a rank that vanished without a result going unnoticed until the deadline, or a
    rank process surviving the failure."""
    hangs = fn in (_hang_on_last, _hang_while_peers_wait)
    start = time.monotonic()
    with pytest.raises(LaunchError, match=message) as info:
        launch(fn, 3, str(tmp_path), timeout_s=HANG_S if hangs else FAIL_DEADLINE_S)
    assert "\n" not in str(info.value)
    if not hangs:
        assert time.monotonic() - start < FAIL_S, "a dead or failed rank must be reported long before the deadline"
    pids = _pids(tmp_path)
    assert len(pids) == 3
    assert _wait_all_dead(pids) == []


def test_ranks_die_when_the_launcher_is_killed(tmp_path):
    """SIGKILL on the launching process (no finally, no atexit) must still take every rank with it."""
    script = tmp_path / "victim.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO / "tests" / "runtime")!r})
        from distlab.runtime.launcher import launch
        from test_launcher import _hang_on_last
        if __name__ == "__main__":
            launch(_hang_on_last, 2, {str(tmp_path)!r}, timeout_s=120)
    """)
    )
    proc = subprocess.Popen([sys.executable, str(script)], cwd=REPO)
    try:
        end = time.monotonic() + 60
        while len(_pids(tmp_path)) < 2 and time.monotonic() < end:
            time.sleep(0.1)
        pids = _pids(tmp_path)
        assert len(pids) == 2, "ranks did not start"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert _wait_all_dead(pids) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_rank_that_exits_inside_a_collective_is_named_not_its_victims():
    """10 of 10 runs must name rank 1 and its exit code, first. Would catch blaming rank 0 or 2 for the
    gloo error that rank 1's disappearance caused in them (the queue held their errors before the process
    table showed rank 1 gone)."""
    for _ in range(10):
        with pytest.raises(LaunchError, match=r"^rank 1 of 3 exited with code 3 before returning a result") as info:
            launch(_exit_in_collective_on_rank_1, 3, timeout_s=30)
        assert "\n" not in str(info.value)


def test_a_script_without_a_main_guard_is_told_so(tmp_path):
    """A script that calls launch() at top level is imported again by every rank, which then dies in
    multiprocessing's bootstrap check: the launcher must say what to fix, not only that rank 0 died."""
    script = tmp_path / "unguarded.py"
    script.write_text(
        textwrap.dedent("""
        import torch.distributed as dist
        from distlab.runtime.launcher import LaunchError, launch

        def rank_fn(rank, world):
            return rank

        try:
            launch(rank_fn, 2, timeout_s=60)
        except LaunchError as exc:
            print("LAUNCH-ERROR", exc)
    """)
    )
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ | {"PYTHONPATH": str(REPO)},
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("LAUNCH-ERROR")), proc.stdout + proc.stderr)
    assert "if __name__ == '__main__':" in line, line


def _world_of_two(rank, world):
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    return t.item()


def test_concurrent_launches_do_not_race_for_a_port():
    """Two worlds rendezvousing at the same moment: with a probed 'free port' one of them could take the
    other's port; the launcher's own store on port 0 cannot collide."""
    out, errors = {}, []

    def run(i):
        try:
            out[i] = launch(_world_of_two, 2)
        except Exception as exc:  # noqa: BLE001 - collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == [] and out == {0: [1.0, 1.0], 1: [1.0, 1.0], 2: [1.0, 1.0]}


def test_bad_arguments_fail_before_any_process_starts():
    with pytest.raises(ValueError, match="picklable"):
        launch(lambda rank, world: rank, 2)
    with pytest.raises(ValueError, match="world_size"):
        launch(_world_of_two, 0)
    if torch.cuda.device_count() < 8:
        with pytest.raises(ValueError, match="one GPU per rank"):
            launch(_world_of_two, 8, backend="nccl")


def test_fresh_interpreters_with_spawn(monkeypatch):
    """The fallback start method (no fork server) runs the same rank function (one rank: a fresh
    interpreter per rank costs seconds on a shared machine)."""
    monkeypatch.setenv("DISTLAB_START_METHOD", "spawn")
    assert launch(_world_of_two, 1) == [0.0]


TORCHRUN_SCRIPT = """
import json, os, sys
import torch, torch.distributed as dist
from distlab.runtime.launcher import LaunchError, launch

def total(rank, world):
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    return [rank, world, t.item(), os.getpid()]

def fail_on_1(rank, world):
    if rank == 1:
        raise KeyError("only rank 1")
    return rank

out = {"results": launch(total, 2)}
for fn, world in ((fail_on_1, 2), (total, 3)):
    try:
        launch(fn, world)
    except LaunchError as exc:
        out[fn.__name__ + str(world)] = str(exc)
if os.environ["RANK"] == "0":
    print("RESULT " + json.dumps(out), flush=True)
"""


def test_same_code_runs_under_torchrun(tmp_path):
    """`torchrun --standalone --nproc-per-node 2` sets up the group; launch() must run fn once per
    torchrun process (no nested spawning), return every rank's result, name a failing rank on every rank,
    and refuse a world size that does not match."""
    script = tmp_path / "under_torchrun.py"
    script.write_text(TORCHRUN_SCRIPT)
    torchrun = Path(sys.executable).parent / "torchrun"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "DISTLAB_SPAWNED")}
    proc = subprocess.Popen(
        [str(torchrun), "--standalone", "--nproc-per-node", "2", str(script)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env | {"OMP_NUM_THREADS": "1"},
    )
    try:
        stdout, stderr = proc.communicate(timeout=120)
    finally:  # torchrun's workers do not die with it: take the whole session down
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, stderr[-3000:]
    line = next(x for x in stdout.splitlines() if x.startswith("RESULT "))
    out = json.loads(line[len("RESULT ") :])
    assert [r[:3] for r in out["results"]] == [[0, 2, 3.0], [1, 2, 3.0]]
    assert out["results"][0][3] != out["results"][1][3]  # two processes, not one
    assert out["fail_on_12"].startswith("rank 1 of 2 failed: KeyError: 'only rank 1'")
    assert out["total3"].startswith("launch asked for 3 ranks but torchrun started 2")


class _LateQueue:
    """A results queue that delivers each scripted message only at the second look, as a loaded machine's queue
    feeder thread does: the message is sent, but not yet readable, when the launcher first asks."""

    def __init__(self, messages):
        self.script = [m for msg in messages for m in (None, msg)]

    def get(self, timeout=None):
        import queue

        if not self.script or self.script[0] is None:
            if self.script:
                self.script.pop(0)
            raise queue.Empty
        return self.script.pop(0)


class _Exited:
    def __init__(self, exitcode):
        self.exitcode = exitcode


def test_an_exited_rank_whose_error_arrives_late_is_not_called_silent():
    """Rank 1 raised its own error, flushed it and exited; rank 0's gloo error reached the launcher first, and rank 1's
    exit shows in the process table before its message is read. Would catch naming rank 1 "exited with code 0 before
    returning a result" (its own ValueError unread), the message seen under load before the drain-after-exit fix."""
    from distlab.runtime.launcher import _raise_root_cause

    procs = [_Exited(None), _Exited(0), _Exited(None)]
    errors = [(0, "RuntimeError: [../gloo/transport/tcp/pair.cc] Connection closed by peer", "")]
    late = _LateQueue([("error", 1, "ValueError: deliberate (x.py:1)", ""), ("error", 2, "RuntimeError: gloo", "")])
    with pytest.raises(LaunchError, match=r"^rank 1 of 3 failed: ValueError: deliberate"):
        _raise_root_cause(procs, {}, late, 3, errors)
