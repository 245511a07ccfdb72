"""The planted hang (distlab.throughput.collective_hang): flight-recorder matching on synthetic dumps, and the
launcher's hang attribution on real gloo processes."""

import pytest

from distlab.runtime.launcher import LaunchError, _odd_one_out, launch
from distlab.throughput.collective_hang import CULPRIT, HANG_DEADLINE_S, diverged, skipped_collective, source_lines


def _entry(pg, seq, op="nccl:all_reduce", p2p=False):
    return {"pg_id": pg, "collective_seq_id": seq, "profiling_name": op, "is_p2p": p2p}


def test_diverged_names_the_missing_ranks():
    """Four ranks; rank 3 never enqueued seq 4 of group 1; p2p entries (their own sequence) are ignored; group 2's
    pg_config lists ranks 0-1 only, so rank 2's absence there is not a divergence. Would catch membership taken
    from the entries alone (a rank that never used a group would look fine) or p2p entries counted."""
    dumps = {r: {"entries": [_entry(1, s) for s in (1, 2, 3, 4)], "pg_config": {}} for r in range(3)}
    dumps[3] = {"entries": [_entry(1, s) for s in (1, 2, 3)] + [_entry(1, 9, p2p=True)], "pg_config": {}}
    for r in (0, 1):
        dumps[r]["entries"].append(_entry(2, 1, "nccl:broadcast"))
        dumps[r]["pg_config"] = {"2": {"ranks": "[0, 1]"}}
    found = diverged(dumps)
    assert found == [{"pg": "1", "seq": 4, "op": "nccl:all_reduce", "missing": [3], "joined": [0, 1, 2]}]


def test_odd_one_out():
    """Three ranks at line A and one at B: B's rank. Two ranks, or no single odd line: the first missing rank."""
    where = {0: ("f.py:10", True), 1: ("f.py:10", True), 2: ("f.py:12", True), 3: ("f.py:10", True)}
    assert _odd_one_out([0, 1, 2, 3], where) == 2
    assert _odd_one_out([0, 2], {0: ("f.py:10", True), 2: ("f.py:12", True)}) == 0
    where[3] = ("f.py:14", True)
    assert _odd_one_out([0, 1, 2, 3], where) == 0


def test_the_launcher_names_the_rank_that_skipped(tmp_path):
    """Real gloo processes, no collective timeout: after the deadline the launcher blames the culprit, at the
    barrier's line, not rank 0. Would catch the launcher's old rule (every rank in a collective: blame rank 0)."""
    with pytest.raises(LaunchError) as info:
        launch(skipped_collective, 3, CULPRIT, 5, 2, 600.0, str(tmp_path), timeout_s=HANG_DEADLINE_S)
    message = str(info.value)
    assert message.startswith(f"rank {CULPRIT} of 3 hung")
    assert f"collective_hang.py:{source_lines()['barrier']}" in message
