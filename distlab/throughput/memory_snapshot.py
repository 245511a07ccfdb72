"""memory-snapshot: fragmentation in PyTorch's CUDA caching allocator, modelled here and measured on a GPU.

An OOM with gigabytes "reserved but unallocated" is fragmentation: the allocator keeps freed blocks cached in
the segments it got from cudaMalloc, and a request larger than every free block needs a new segment even when
the free blocks add up to more than it asks. The rules that decide it (c10/cuda/CUDACachingAllocator.cpp):
requests of at most 1 MiB come from 2 MiB segments (the small pool); requests under 10 MiB from 20 MiB segments;
larger ones get a segment of their own size rounded up to 2 MiB. A block is split when the rest exceeds 1 MiB,
and freed blocks merge only with free neighbours in the same segment.

The planted pattern: nine 6 MiB tensors (three per 20 MiB segment), every other one freed, then a 12 MiB
request. `CachingAllocatorModel` (pure Python, the rules above, large pool only) predicts it on any machine; on
a GPU the experiment runs the pattern for real under `torch.cuda.memory._record_memory_history`, reads the
snapshot (`torch.cuda.memory._snapshot()`: segments and blocks; `_dump_snapshot` writes the pickle that
pytorch.org/memory_viz draws), repeats it with `expandable_segments:True`, and provokes one `num_alloc_retries`
(a cudaMalloc that fails, cached blocks freed, the request retried: the counter an OOM post-mortem reads first).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from distlab.core.experiments import experiment
from distlab.core.facts import value
from distlab.core.results import Result

MIB = 1 << 20
# The allocator's constants, from c10/cuda/CUDACachingAllocator.cpp via distlab/data/caching_allocator.toml
SMALL_REQUEST = value("caching_allocator.kSmallSize.mib") * MIB  # kSmallSize
SMALL_SEGMENT = value("caching_allocator.kSmallBuffer.mib") * MIB  # kSmallBuffer
LARGE_SEGMENT = value("caching_allocator.kLargeBuffer.mib") * MIB  # kLargeBuffer
MIN_LARGE_ALLOC = value("caching_allocator.kMinLargeAlloc.mib") * MIB  # kMinLargeAlloc
ROUND_LARGE = value("caching_allocator.kRoundLarge.mib") * MIB  # kRoundLarge
PATTERN = dict(count=9, tensor_mib=6, big_mib=12)


def segment_size(nbytes: int) -> int:
    """The cudaMalloc size for a request that no cached block can serve (large pool)."""
    if nbytes <= SMALL_REQUEST:
        return SMALL_SEGMENT
    if nbytes < MIN_LARGE_ALLOC:
        return LARGE_SEGMENT
    return -(-nbytes // ROUND_LARGE) * ROUND_LARGE


@dataclass
class CachingAllocatorModel:
    """The large pool of the caching allocator: segments of [offset, size, free] blocks, best-fit, split, merge."""

    segments: list[list[list]] = field(default_factory=list)

    def malloc(self, nbytes: int) -> tuple[int, int]:
        nbytes = -(-nbytes // 512) * 512
        fits = [
            (b[1], s, i) for s, seg in enumerate(self.segments) for i, b in enumerate(seg) if b[2] and b[1] >= nbytes
        ]
        if fits:
            _, s, i = min(fits)  # the smallest free block that fits
        else:
            self.segments.append([[0, segment_size(nbytes), True]])
            s, i = len(self.segments) - 1, 0
        off, size, _ = self.segments[s][i]
        if size - nbytes > SMALL_REQUEST:  # split: the rest stays cached as a free block
            self.segments[s][i : i + 1] = [[off, nbytes, False], [off + nbytes, size - nbytes, True]]
        else:
            self.segments[s][i][2] = False
        return s, off

    def free(self, where: tuple[int, int]) -> None:
        seg = self.segments[where[0]]
        i = next(k for k, b in enumerate(seg) if b[0] == where[1])
        seg[i][2] = True
        for j in (i + 1, i):  # merge with a free right neighbour, then with a free left one
            if 0 < j < len(seg) and seg[j][2] and seg[j - 1][2]:
                seg[j - 1][1] += seg[j][1]
                del seg[j]

    def stats(self) -> dict[str, int]:
        blocks = [b for seg in self.segments for b in seg]
        return {
            "segments": len(self.segments),
            "reserved": sum(b[1] for b in blocks),
            "allocated": sum(b[1] for b in blocks if not b[2]),
            "largest_free": max((b[1] for b in blocks if b[2]), default=0),
        }


def run_pattern(alloc, free, count: int, tensor_mib: int, big_mib: int) -> None:
    """The planted pattern, on any allocator given as two callables."""
    held = [alloc(tensor_mib * MIB) for _ in range(count)]
    for h in held[::2]:
        free(h)
    alloc(big_mib * MIB)


def model_stats() -> dict[str, int]:
    m = CachingAllocatorModel()
    run_pattern(m.malloc, m.free, **PATTERN)
    return m.stats()


def cuda_stats(expandable: bool) -> dict[str, int]:
    """The pattern on the GPU: the snapshot's segments that hold the pattern's tensors."""
    import torch

    torch.cuda.memory._set_allocator_settings(f"expandable_segments:{expandable}")
    torch.cuda.empty_cache()
    torch.cuda.memory._record_memory_history(max_entries=10000)
    live = {}

    def alloc(nbytes):
        t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        live[t.data_ptr()] = t
        return t.data_ptr()

    run_pattern(alloc, lambda p: live.pop(p), **PATTERN)
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    ptrs = set(live)
    mine = [s for s in snap["segments"] if any(b["address"] in ptrs for b in s["blocks"])]
    blocks = [b for s in mine for b in s["blocks"]]
    out = {
        "segments": len(mine),
        "reserved": sum(s["total_size"] for s in mine),
        "allocated": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
        "largest_free": max((b["size"] for b in blocks if b["state"] == "inactive"), default=0),
    }
    live.clear()
    torch.cuda.empty_cache()
    torch.cuda.memory._set_allocator_settings("expandable_segments:False")
    return out


def cuda_retries() -> int:
    """One retry: cap the process a little above what it holds, fill the small pool's cache with 1 MiB blocks (80 MiB
    of 2 MiB segments), free them, then ask for 60 MiB. The cap refuses the new segment; no cached block of the large
    pool can be released for it, so the allocator frees every cached segment and retries: the path that counts
    num_alloc_retries (freeing a few large cached blocks first would succeed without counting one)."""
    import torch

    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(0).total_memory
    before = torch.cuda.memory_stats().get("num_alloc_retries", 0)
    limit = torch.cuda.memory_reserved() + 100 * MIB
    torch.cuda.set_per_process_memory_fraction(limit / total)
    try:
        held = [torch.empty(MIB, dtype=torch.uint8, device="cuda") for _ in range(80)]
        del held
        big = torch.empty(60 * MIB, dtype=torch.uint8, device="cuda")
        del big
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    return torch.cuda.memory_stats().get("num_alloc_retries", 0) - before


def _row(stats: dict[str, int]) -> list:
    return [stats["segments"], *(stats[k] / MIB for k in ("reserved", "allocated", "largest_free"))]


@experiment(
    "memory-snapshot",
    "fragmentation in the CUDA caching allocator: a planted pattern modelled in pure Python; on a GPU measured "
    "with _record_memory_history and _snapshot, with expandable_segments, and one num_alloc_retries",
    kind="measured",
)
def memory_snapshot(device: str) -> Result:
    r = Result("memory-snapshot")
    m = model_stats()
    c, t, big = PATTERN["count"], PATTERN["tensor_mib"], PATTERN["big_mib"]
    per_segment = LARGE_SEGMENT // (t * MIB)
    mib_by_hand = {  # three 6 MiB blocks per 20 MiB segment; the 12 MiB request fits no free block (6 or 8 MiB)
        "reserved": -(-c // per_segment) * 20 + big,
        "allocated": (c - (c + 1) // 2) * t + big,
        "largest_free": t + 20 - per_segment * t,
    }
    by_hand = {"segments": -(-c // per_segment) + 1} | {k: v * MIB for k, v in mib_by_hand.items()}
    rows = [["model (pure Python, the allocator's rules)", *_row(m)]]
    for k, v in by_hand.items():
        r.claim(f"model: {k} = hand count", m[k], v, unit="" if k == "segments" else "B")
    cells_by_hand = {"segments": by_hand["segments"]} | mib_by_hand  # the table's cells, as shown
    for (k, want), v in zip(cells_by_hand.items(), rows[0][1:], strict=True):
        r.claim(f"table, model row: {k} = hand count", v, want)
    r.add("model_reserved_mib", m["reserved"] / MIB, "MiB", "reserved after the pattern (model)")
    r.add("model_allocated_mib", m["allocated"] / MIB, "MiB", "allocated after the pattern (model)")
    r.add("model_largest_free_mib", m["largest_free"] / MIB, "MiB", "largest cached free block (model)")
    r.add("big_mib", big, "MiB", "the request that needs a new segment")
    r.add("tensor_mib", t, "MiB", "the small tensors")
    r.add("count", c, "", "small tensors allocated")
    r.add("model_waste", 1 - m["allocated"] / m["reserved"], "fraction", "reserved but unallocated (model)")
    for k in mib_by_hand:  # the MiB the deep dive prints, against the hand count in MiB
        r.claim(f"shown: model_{k}_mib = hand count", r.quantities[f"model_{k}_mib"].value, mib_by_hand[k], unit="MiB")
    free_by_hand = mib_by_hand["reserved"] - mib_by_hand["allocated"]
    r.claim(
        "shown: model_waste = free / reserved by hand",
        r.quantities["model_waste"].value,
        free_by_hand / mib_by_hand["reserved"],
    )
    # Typos in the transcribed constants: the source's comments tie them together ("small allocations are packed in
    # 2 MiB blocks" twice the 1 MiB limit; "allocations between 1 and 10 MiB may use" the 20 MiB kLargeBuffer; large
    # ones rounded "to 2 MiB", the small segment's size).
    r.claim("allocator constants: small segment = 2 x the largest small request", SMALL_SEGMENT, 2 * SMALL_REQUEST)
    r.claim("allocator constants: shared large segment = 2 x kMinLargeAlloc", LARGE_SEGMENT, 2 * MIN_LARGE_ALLOC)
    r.claim("allocator constants: large rounding = the small segment", ROUND_LARGE, SMALL_SEGMENT)
    r.claim(
        "model: the free cached bytes exceed the request that got a new segment",
        m["reserved"] - m["allocated"],
        big * MIB,
        relation=">=",
        unit="B",
    )
    if device == "cuda":
        real = cuda_stats(expandable=False)
        rows.append(["CUDA, measured (snapshot)", *_row(real)])
        for k in by_hand:
            r.claim(f"GPU: {k} = the model's", real[k], m[k], unit="" if k == "segments" else "B")
        grown = cuda_stats(expandable=True)
        rows.append(["CUDA, expandable_segments:True", *_row(grown)])
        r.add("expandable_reserved_mib", grown["reserved"] / MIB, "MiB", "reserved with expandable segments")
        retries = cuda_retries()
        r.add("alloc_retries", retries, "", "num_alloc_retries the capped pattern added")
        r.claim("GPU: a refused cudaMalloc is retried after freeing the cache", retries, 1, relation=">=")
    r.table(
        "pattern",
        ["allocator", "segments", "reserved (MiB)", "allocated (MiB)", "largest free block (MiB)"],
        rows,
        caption=f"{c} tensors of {t} MiB, every other one freed, then {big} MiB; on a GPU, only the segments that "
        "hold the pattern's tensors are counted.",
        kind="" if device == "cuda" else "simulated",
    )
    return r
