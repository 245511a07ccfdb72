"""The caching-allocator model against cases worked by hand from the allocator's rules (2 MiB segments up to
1 MiB, 20 MiB segments under 10 MiB, 2 MiB rounding above; split when the rest exceeds 1 MiB; merge with free
neighbours only)."""

from distlab.throughput.memory_snapshot import MIB, CachingAllocatorModel, run_pattern, segment_size


def test_segment_sizes():
    """Catches a wrong pool boundary: 1 MiB is small, 10 MiB is rounded, 9.9 MiB takes a 20 MiB segment."""
    assert segment_size(MIB) == 2 * MIB
    assert segment_size(MIB + 1) == 20 * MIB
    assert segment_size(10 * MIB - 1) == 20 * MIB
    assert segment_size(10 * MIB) == 10 * MIB
    assert segment_size(11 * MIB + 1) == 12 * MIB


def test_split_and_merge():
    """Catches a free that does not merge: freeing three neighbours in a 20 MiB segment leaves one 20 MiB block,
    which then serves a 15 MiB request without a new segment."""
    m = CachingAllocatorModel()
    a, b, c = (m.malloc(5 * MIB) for _ in range(3))
    for x in (a, c, b):
        m.free(x)
    assert m.stats() == {"segments": 1, "reserved": 20 * MIB, "allocated": 0, "largest_free": 20 * MIB}
    m.malloc(15 * MIB)
    assert m.stats()["segments"] == 1


def test_fragmentation_pattern_awkward_sizes():
    """Catches a search that only looks at the newest segment's end or a free that forgets to merge: 7 tensors of
    7 MiB (two per 20 MiB segment, 6 MiB tails), every other freed, then 13 MiB. The holes of segments 0-2 are 7
    and 6 MiB (not adjacent), but segment 3 held only tensor 6: freed, it merges back to 20 MiB and takes the
    request, so no fifth segment."""
    m = CachingAllocatorModel()
    run_pattern(m.malloc, m.free, count=7, tensor_mib=7, big_mib=13)
    s = m.stats()
    assert s["segments"] == 4 and s["reserved"] == 4 * 20 * MIB
    assert s["allocated"] == (3 * 7 + 13) * MIB
