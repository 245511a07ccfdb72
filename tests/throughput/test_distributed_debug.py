"""TORCH_DISTRIBUTED_DEBUG=DETAIL on a real 2-rank gloo mismatch, and the parsing of monitored_barrier's message."""

from distlab.runtime.launcher import launch
from distlab.throughput.distributed_debug import SIZES, mismatched_all_reduce, named_ranks


def test_detail_names_both_collectives():
    """Catches DETAIL not taking effect for a group made after setting the level (the all-reduce would abort the
    process instead of raising): both ranks raise, each naming its own shape and its peer's."""
    out = launch(mismatched_all_reduce, 2, True, backend="gloo", timeout_s=60)
    for rank, x in enumerate(out):
        assert "Detected mismatch between collectives" in x["error"]
        assert f"TensorShape=[{SIZES[rank]}]" in x["error"] and f"TensorShape=[{SIZES[1 - rank]}]" in x["error"]


def test_named_ranks():
    """Catches a parser that reads one rank of several, or invents one."""
    assert named_ranks("[Rank 0]: Ranks 2 failed to pass monitoredBarrier in 1000 ms") == [2]
    assert named_ranks("[Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 1000 ms") == [1, 3]
    assert named_ranks("Rank 1 successfully reached monitoredBarrier") == []
    assert named_ranks(None) == []
