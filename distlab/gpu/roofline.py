"""The roofline, measured: ceilings of the machine that builds, and three kernels placed under them.

Attainable FLOP/s = min(peak FLOP/s, intensity x bytes/s), intensity = FLOPs / minimum bytes moved
(Williams, Waterman, Patterson 2009, https://doi.org/10.1145/1498765.1498785). We count FLOPs and the
minimum bytes from the tensors' shapes and dtypes (each operand read once, the result written once),
time each kernel (warm-up, interleaved repeats, median) and compare.

Ceilings are measured, not assumed: the compute roof is the best rate of a large matmul, the memory
roof the best rate of STREAM-like kernels (copy, add, triad, and two read-only ones: a sum and a BLAS dot;
McCalpin's STREAM reports the best of its runs too) on arrays at least twice the last-level cache.

The memory roof counts the bytes the memory system really moves. On a CPU a store that misses the cache
first reads its line (write-allocate, "read for ownership": Intel 64 and IA-32 Architectures Optimization
Reference Manual, the section on write-combining and non-temporal stores), so a kernel that writes b
bytes moves 2b: STREAM's copy moves three bytes for every two it counts. Counting only the minimum bytes
made the roof read low and a read-only kernel (the batch-1 matvec, which writes almost nothing) ran at
100-118 % of it. GPUs write whole sectors into L2 without reading them from DRAM, so there the count is the
minimum. The kernels' own intensities stay minimum-bytes, as the roofline defines them (Williams et al.).
The FlashAttention chapter places its kernels on `ceilings(gpu_name, dtype)`, the roofline of a datasheet.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from distlab.core.experiments import device_name, experiment
from distlab.core.results import Quantity, Result
from distlab.hardware.gpus import BYTES_PER_ELEMENT, gpu, gpu_names, match_device
from distlab.runtime.threads import one_core


@dataclass(frozen=True)
class Ceilings:
    """A roofline: a compute roof (FLOP/s) and a memory roof (bytes/s)."""

    label: str
    peak_flops: float
    bytes_per_s: float

    @property
    def ridge(self) -> float:
        """FLOP/byte where the two roofs meet."""
        return self.peak_flops / self.bytes_per_s

    def attainable(self, intensity: float) -> float:
        return min(self.peak_flops, intensity * self.bytes_per_s)

    def bound(self, intensity: float) -> str:
        return "memory-bound" if intensity < self.ridge else "compute-bound"


def ceilings(gpu_name: str, dtype: str = "bf16") -> Ceilings:
    """The datasheet roofline of a GPU in distlab/data/gpus.toml: dense peak for `dtype` and HBM bandwidth."""
    g = gpu(gpu_name)
    return Ceilings(f"{g.name} {dtype} (datasheet)", g.peak_flops(dtype), g.hbm_bytes_per_s)


# ---------------------------------------------------------------- counting (from shapes and dtypes)
def gemm_flops(m: int, n: int, k: int, batch: int = 1) -> int:
    """(m, k) @ (k, n): m*n outputs, each k multiplies and k adds."""
    return 2 * batch * m * n * k


def min_bytes(*tensors: torch.Tensor) -> int:
    """Every operand read once and every result written once: the least traffic any kernel can do."""
    return sum(t.numel() * t.element_size() for t in tensors)


# Closed forms, written independently of the counting above (the claims compare the two).
def square_gemm_intensity(n: int, bytes_per_element: int) -> float:
    """2n^3 / (3 n^2 b) = 2n / 3b: grows with n, which is why large matmuls are compute-bound."""
    return 2 * n / (3 * bytes_per_element)


def add_intensity(bytes_per_element: int) -> float:
    """One FLOP per element, two reads and a write: 1 / 3b, whatever the size."""
    return 1 / (3 * bytes_per_element)


def matvec_intensity(m: int, n: int, bytes_per_element: int) -> float:
    """2mn / (b(mn + n + m)), about 2/b: each matrix element is used once."""
    return 2 * m * n / (bytes_per_element * (m * n + n + m))


# ---------------------------------------------------------------- kernels and timing
@dataclass
class Kernel:
    name: str
    fn: Callable[[], object]
    flops: int
    bytes: int
    shape: str = ""
    tensors: tuple = ()
    """The operands and the result, for checks (the counts above come from them)."""
    store_bytes: int = 0
    """Bytes written (part of `bytes`): on a CPU each is read first (write-allocate), see `traffic`."""

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes

    def traffic(self, device: str) -> int:
        """Bytes the memory system moves: the minimum, plus one read of every written line on a CPU."""
        return self.bytes + (self.store_bytes if device == "cpu" else 0)


def _rand(shape, dtype, device) -> torch.Tensor:
    """Random data, not zeros: on GPUs zeros draw less power and run faster (a bf16 matmul on an H200 ran about
    13 % faster on zeros). Large CPU arrays repeat one random MiB-block: the values do not change how fast memory
    streams, and drawing gigabytes of random numbers on one core would take longer than the measurement."""
    numel = math.prod(shape) if isinstance(shape, tuple) else shape
    block = 1 << 18
    if device != "cpu" or numel <= 4 * block:
        return torch.rand(shape, dtype=torch.float32, device=device).to(dtype)
    tile = torch.rand(block, dtype=torch.float32).to(dtype)
    return tile.repeat(-(-numel // block))[:numel].reshape(shape).clone()


def gemm_kernel(name: str, n: int, dtype, device: str, batch: int = 0) -> Kernel:
    shape = (batch, n, n) if batch else (n, n)
    a, b, c = _rand(shape, dtype, device), _rand(shape, dtype, device), torch.empty(shape, dtype=dtype, device=device)
    fn = (lambda: torch.bmm(a, b, out=c)) if batch else (lambda: torch.mm(a, b, out=c))
    return Kernel(
        name,
        fn,
        gemm_flops(n, n, n, max(batch, 1)),
        min_bytes(a, b, c),
        f"{batch} x " * bool(batch) + f"{n}x{n} @ {n}x{n}",
        (a, b, c),
    )


def add_kernel(name: str, n: int, dtype, device: str) -> Kernel:
    x, y, z = _rand(n, dtype, device), _rand(n, dtype, device), torch.empty(n, dtype=dtype, device=device)
    return Kernel(name, lambda: torch.add(x, y, out=z), n, min_bytes(x, y, z), f"{n:,} + {n:,}", (x, y, z))


def matvec_kernel(name: str, m: int, n: int, dtype, device: str) -> Kernel:
    a, x, y = _rand((m, n), dtype, device), _rand(n, dtype, device), torch.empty(m, dtype=dtype, device=device)
    return Kernel(
        name, lambda: torch.mv(a, x, out=y), gemm_flops(m, 1, n), min_bytes(a, x, y), f"{m}x{n} @ {n}", (a, x, y)
    )


def stream_kernels(n: int, dtype, device: str) -> list[Kernel]:
    """STREAM's copy, add and triad, plus two read-only kernels (no writes at all): torch's sum and a BLAS
    dot, whose prefetching streams the way a BLAS matvec does; on n-element arrays."""
    x, y, z = _rand(n, dtype, device), _rand(n, dtype, device), torch.empty(n, dtype=dtype, device=device)
    out = min_bytes(z)
    return [
        Kernel("stream copy", lambda: z.copy_(x), 0, min_bytes(x, z), store_bytes=out),
        Kernel("stream add", lambda: torch.add(x, y, out=z), n, min_bytes(x, y, z), store_bytes=out),
        Kernel("stream triad", lambda: torch.add(x, y, alpha=3.0, out=z), 2 * n, min_bytes(x, y, z), store_bytes=out),
        Kernel("stream read (sum)", lambda: x.sum(), n, min_bytes(x)),
        Kernel("stream read (dot)", lambda: torch.dot(x, y), 2 * n, min_bytes(x, y)),
    ]


def cache_size_bytes(text: str) -> int:
    """A cache size as Linux sysfs prints it ('48K', '32768K', '2M'; bare digits are bytes), in bytes."""
    text = text.strip()
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


# Sysfs strings and their sizes, worked by hand (1K = 1024 B): the parser's check.
CACHE_SIZE_CASES = (("48K", 49_152), ("32768K", 33_554_432), ("2M", 2_097_152), ("1G", 1_073_741_824), ("512", 512))


def last_level_cache_bytes(device: str) -> int:
    """The CPU's last-level cache (Linux sysfs), or the GPU's L2: arrays must be well beyond it, or the
    'memory' roof measures the cache (the CI machines' shared L3 is 300 MiB)."""
    if device == "cuda":
        return int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 * 2**20))
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            sizes.append(cache_size_bytes((index / "size").read_text()))
        except OSError:
            continue
    return max(sizes, default=32 * 2**20)


def sizes_beyond_cache(cfg: dict, device: str, bytes_per_element: int) -> dict:
    """The config's array sizes grown, where needed, so every stream array and the matvec's matrix hold at
    least twice the last-level cache."""
    floor = 2 * last_level_cache_bytes(device) // bytes_per_element
    rows, cols = cfg["mv"]
    grown = dict(cfg, stream_n=max(cfg["stream_n"], floor), add_n=max(cfg["add_n"], floor + 7))
    grown["mv"] = (max(rows, -(-floor // cols) | 1), cols)  # odd row counts, as the awkward sizes elsewhere
    return grown


def time_once(fn: Callable[[], object], device: str) -> float:
    """Seconds for one call; on CUDA between two events, after the GPU is idle."""
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def time_kernels(kernels: list[Kernel], device: str, rounds: int, warmup: int = 1) -> dict[str, list[float]]:
    """Warm up each kernel, then time them in interleaved rounds so that a change of machine load
    (2 shared cores) hits every kernel alike instead of one of them."""
    for k in kernels:
        for _ in range(warmup):
            k.fn()
    if device == "cuda":
        torch.cuda.synchronize()
    times: dict[str, list[float]] = {k.name: [] for k in kernels}
    for _ in range(rounds):
        for k in kernels:
            times[k.name].append(time_once(k.fn, device))
    return times


# ---------------------------------------------------------------- sizes per device
CONFIG = {
    # CPU: one core (see roofline()), fp32; arrays 4x the 32 MiB L3 and more. The ceiling matmul is no longer
    # per call than the large GEMM and gets `ceiling_rounds` extra rounds: under load a short call catches a quiet
    # window more often than a long one (a 1536^3 ceiling once read 49 GFLOP/s while the 1024^3 GEMM hit 67).
    "cpu": dict(
        dtype=torch.float32,
        ceiling_n=1024,
        ceiling_rounds=20,
        gemm_n=1024,
        add_n=2**25 + 7,
        mv=(7919, 8192),
        stream_n=2**25,
        rounds=7,
        sweep=[4, 8, 16, 32, 64, 128, 256, 512, 1024],
        sweep_bytes=192e6,
        sweep_flops=1e9,
        sweep_rounds=3,
    ),
    # GPU: bf16 tensor cores; arrays ~20x a 60 MiB L2.
    "cuda": dict(
        dtype=torch.bfloat16,
        ceiling_n=8192,
        ceiling_rounds=20,
        gemm_n=4096,
        add_n=2**28 + 7,
        mv=(16384, 16383),
        stream_n=2**28,
        rounds=20,
        sweep=[16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192],
        sweep_bytes=3e9,
        sweep_flops=2e12,
        sweep_rounds=10,
    ),
}
DTYPE_NAME = {torch.float32: "fp32", torch.bfloat16: "bf16"}
# The "at most its roof" claims compare each kernel's BEST round with the best ceilings (best-of-N is far
# steadier than a median under load); the slack covers what load on a shared 2-core machine still moves.
POINT_SLACK = 0.15  # kernels timed in the same interleaved rounds as the ceilings
SWEEP_SLACK = 0.25  # the sweep is timed between two ceiling phases, so load may differ more
DEFAULT_PANEL_GPU = "H100-SXM"


@experiment("roofline", "measured compute and memory ceilings; GEMM, add and matvec placed on the roofline")
def roofline(device: str) -> Result:
    """On CPU the roofline of ONE core: the build machine's 2 cores are shared with other jobs, and a
    one-thread measurement moves far less with their load than a two-thread one (whose ridge moved
    five-fold between runs). On CUDA the whole GPU."""
    with one_core(device):
        return _roofline(device)


def _roofline(device: str) -> Result:
    r = Result("roofline")
    dtype = CONFIG[device]["dtype"]
    dname, b = DTYPE_NAME[dtype], BYTES_PER_ELEMENT[DTYPE_NAME[dtype]]
    cfg = sizes_beyond_cache(CONFIG[device], device, b) if CONFIG[device].get("beyond_cache", True) else CONFIG[device]
    torch.manual_seed(0)
    ceiling_kernels = [
        gemm_kernel("compute ceiling (matmul)", cfg["ceiling_n"], dtype, device),
        *stream_kernels(cfg["stream_n"], dtype, device),
    ]
    n, (mv_m, mv_n) = cfg["gemm_n"], cfg["mv"]
    points = [
        gemm_kernel("large GEMM", n, dtype, device),
        add_kernel("elementwise add", cfg["add_n"], dtype, device),
        matvec_kernel("batch-1 matvec", mv_m, mv_n, dtype, device),
    ]
    times = time_kernels(ceiling_kernels + points, device, cfg["rounds"])
    best = {k.name: min(times[k.name]) for k in ceiling_kernels}
    peak = ceiling_kernels[0].flops / best["compute ceiling (matmul)"]
    bw = max(k.traffic(device) / best[k.name] for k in ceiling_kernels[1:])

    # The sweep: batched square GEMMs sized so each call streams `sweep_bytes` (far beyond the caches),
    # capped in FLOPs so the large sizes stay quick.
    sweep = []
    for s in cfg["sweep"]:
        batch = int(max(1, min(cfg["sweep_bytes"] / (3 * s * s * b), cfg["sweep_flops"] / (2 * s**3))))
        k = gemm_kernel(f"sweep {s}", s, dtype, device, batch=batch)
        ts = time_kernels([k], device, cfg["sweep_rounds"])[k.name]
        sweep.append((s, batch, k.intensity, k.flops / statistics.median(ts), k.flops / min(ts)))
        del k
    # Re-measure the ceilings after the sweep; keep the best of both phases.
    again = ceiling_kernels
    t2 = time_kernels(again, device, max(2, cfg["rounds"] // 3))
    t2[again[0].name] += time_kernels(again[:1], device, cfg["ceiling_rounds"], warmup=0)[again[0].name]
    # The compute roof is the best matmul rate seen anywhere in the run (as the memory roof is the best stream):
    # a batched 512^3 GEMM of the sweep can beat one 1024^3 call, and a roof below a measured point is no roof.
    peak = max(
        [peak, again[0].flops / min(t2[again[0].name]), points[0].flops / min(times[points[0].name])]
        + [p[4] for p in sweep]
    )
    bw = max([bw] + [k.traffic(device) / min(t2[k.name]) for k in again[1:]])
    del again, ceiling_kernels
    roof = Ceilings(f"{device_name(device)} {dname} (measured)", peak, bw)

    r.add("compute_ceiling", peak, "FLOP/s", f"measured compute ceiling ({dname} matmul {cfg['ceiling_n']}^3, best)")
    r.add("memory_ceiling", bw, "B/s", "measured memory ceiling (best STREAM-like kernel, bytes really moved)")
    r.add(
        "write_allocate_bytes_per_store",
        2 if device == "cpu" else 1,
        "",
        "bytes moved per byte stored, in the memory roof's count (write-allocate on a CPU)",
    )
    r.add("stream_array_bytes", cfg["stream_n"] * b, "B", "bytes of each STREAM array")
    r.add("last_level_cache", last_level_cache_bytes(device), "B", "last-level cache of the measuring device")
    r.add("ridge", roof.ridge, "FLOP/B", "measured ridge point")
    r.add("dtype_bytes", b, "B", f"bytes per {dname} element")
    rows, pts = [], []
    closed = {
        "large GEMM": square_gemm_intensity(n, b),
        "elementwise add": add_intensity(b),
        "batch-1 matvec": matvec_intensity(mv_m, mv_n, b),
    }
    for k in points:
        t = statistics.median(times[k.name])
        achieved, attainable = k.flops / t, roof.attainable(k.intensity)
        slug = k.name.split()[-1].lower()
        r.add(f"{slug}_intensity", k.intensity, "FLOP/B", f"{k.name}: counted intensity")
        r.add(f"{slug}_flops_per_s", achieved, "FLOP/s", f"{k.name}: achieved FLOP/s (median)")
        r.add(f"{slug}_bytes_per_s", k.bytes / t, "B/s", f"{k.name}: achieved bytes/s (median)")
        r.add(f"{slug}_of_roof", achieved / attainable, "fraction", f"{k.name}: share of the attainable roof")
        r.add(f"{slug}_flops", k.flops, "FLOP", f"{k.name}: FLOPs")
        r.add(f"{slug}_bytes", k.bytes, "B", f"{k.name}: minimum bytes")
        r.claim(
            f"{k.name}: counted intensity = closed form",
            k.intensity,
            closed[k.name],
            rel_tol=1e-12,
            unit="FLOP/B",
            formula={"large GEMM": "2n/3b", "elementwise add": "1/3b"}.get(k.name, "2mn/b(mn+m+n)"),
        )
        relation = ">=" if k.name == "large GEMM" else "<="
        r.claim(
            f"{k.name}: {'compute' if relation == '>=' else 'memory'}-bound on the measured roofline",
            k.intensity,
            roof.ridge,
            relation=relation,
            unit="FLOP/B",
            formula="intensity vs measured ridge",
            kind="timing",
        )
        if k.name != "large GEMM":  # the GEMM is one of the matmuls the compute roof is the best of
            r.claim(
                f"{k.name}: best round at most the attainable roof",
                k.flops / min(times[k.name]),
                attainable,
                relation="<=",
                rel_tol=POINT_SLACK,
                unit="FLOP/s",
                formula="I x the memory roof (bytes really moved); slack for timing noise",
                kind="timing",
            )
        rows.append(
            [
                k.name,
                k.shape,
                dname,
                Quantity(k.flops, "FLOP"),
                Quantity(k.bytes, "B"),
                f"{k.intensity:.3g}",
                Quantity(achieved, "FLOP/s"),
                Quantity(k.bytes / t, "B/s"),
                f"{100 * achieved / attainable:.0f} %",
                roof.bound(k.intensity),
            ]
        )
        pts.append({"name": k.name, "intensity": k.intensity, "flops_per_s": achieved, "dtype": dname})
    r.table(
        "kernels",
        [
            "kernel",
            "shape",
            "dtype",
            "FLOPs",
            "min bytes",
            "FLOP/B",
            "achieved FLOP/s",
            "achieved B/s",
            "of roof",
            "region",
        ],
        rows,
    )
    r.table(
        "ceilings",
        ["ceiling", "kernel", "best rate"],
        [
            [
                "compute",
                f"best {dname} matmul of the run ({cfg['ceiling_n']}³, the GEMM and the sweep)",
                Quantity(peak, "FLOP/s"),
            ],
            [
                "memory",
                "best of STREAM copy, add, triad and two read-only kernels (sum, dot), counting the bytes "
                "really moved" + (" (a store reads its line first)" if device == "cpu" else ""),
                Quantity(bw, "B/s"),
            ],
        ],
    )
    copy = stream_kernels(4, dtype, "cpu")[0]  # one read and one write per element, counted by hand below
    r.claim(
        "STREAM copy: bytes the roof counts / minimum bytes (3/2 with write-allocate, 1 without)",
        copy.traffic(device) / copy.bytes,
        1.5 if device == "cpu" else 1.0,
        rel_tol=1e-12,
        formula="(read + line read + write) / (read + write)",
    )
    llc, element = last_level_cache_bytes(device), torch.finfo(dtype).bits // 8
    # the page's sizes and factor against the rules it states, worked out apart from the code that applies them
    r.claim(
        "STREAM array, cache parser, write-allocate = stated rules by hand (off)",
        (r.quantities["stream_array_bytes"].value != max(CONFIG[device]["stream_n"] * element, 2 * llc))
        + sum(cache_size_bytes(text) != size for text, size in CACHE_SIZE_CASES)
        + (
            r.quantities["write_allocate_bytes_per_store"].value
            != (copy.traffic(device) - copy.bytes) / copy.store_bytes + 1
        ),
        0,
    )
    r.claim(
        "every STREAM array and the matvec's matrix hold at least twice the last-level cache",
        min(cfg["stream_n"] * b, cfg["mv"][0] * cfg["mv"][1] * b),
        2 * last_level_cache_bytes(device),
        relation=">=",
        unit="B",
        formula="otherwise the 'memory' roof measures the cache",
    )

    # Sweep claims: intensity grows with n and crosses the measured ridge; no point above its roof.
    r.table(
        "sweep",
        ["n", "matrices per call", "FLOP/B", "achieved FLOP/s", "of roof", "region"],
        [
            [s, bt, f"{i:.3g}", Quantity(f, "FLOP/s"), f"{100 * f / roof.attainable(i):.0f} %", roof.bound(i)]
            for s, bt, i, f, _ in sweep
        ],
    )
    r.claim(
        "sweep: smallest GEMM is memory-bound", sweep[0][2], roof.ridge, relation="<=", unit="FLOP/B", kind="timing"
    )
    r.claim(
        "sweep: largest GEMM is compute-bound", sweep[-1][2], roof.ridge, relation=">=", unit="FLOP/B", kind="timing"
    )
    r.claim(
        "sweep: intensity increases with n (steps that did not)",
        sum(a[2] >= b_[2] for a, b_ in zip(sweep, sweep[1:])),
        0,
    )
    bound = [p for p in sweep if p[2] < roof.ridge]  # the memory-bound sizes (the compute roof is their best)
    # On a noisy run the measured ridge can fall below the smallest size; the claim above then reports it, and this
    # one has nothing to check (it must not crash the page).
    if bound:
        worst = max(bound, key=lambda p: p[4] / roof.attainable(p[2]))
        r.claim(
            f"sweep: memory-bound sizes at most the memory roof (worst n={worst[0]})",
            worst[4],
            roof.attainable(worst[2]),
            relation="<=",
            rel_tol=SWEEP_SLACK,
            unit="FLOP/s",
            formula="I x the memory roof",
            kind="timing",
        )
    r.data.update(points=pts, sweep=[list(p[:4]) for p in sweep], peak=peak, bw=bw, dtype=dname)

    panel = _panel_gpu(device, r, points, b)
    if device == "cuda":
        _check_against_datasheet(r, roof, match_device(device_name(device)))
    _figures(r, roof, pts, sweep, panel, device)
    return r


def _panel_gpu(device: str, r: Result, points: list[Kernel], b: int):
    """The datacenter GPU whose datasheet roofline the page shows: this GPU on a GPU run, else H100 (a stored
    GPU measurement is shown beside by the page, with its own figure). The kernels' bf16 intensities must sit
    on the same sides of every datasheet ridge as on the measured one."""
    own = match_device(device_name(device)) if device == "cuda" else None
    chip = own or gpu(DEFAULT_PANEL_GPU)
    for name in gpu_names():
        g = gpu(name)
        for k in points:
            i_bf16 = k.intensity * b / BYTES_PER_ELEMENT["bf16"]  # same shape in bf16: bytes scale with b
            relation = ">=" if k.name == "large GEMM" else "<="
            r.claim(
                f"{k.name} in bf16 on the {g.name} roofline: {'compute' if relation == '>=' else 'memory'}-bound",
                i_bf16,
                g.ridge("bf16"),
                relation=relation,
                unit="FLOP/B",
                formula="intensity vs datasheet ridge",
            )
    r.add("panel_ridge", chip.ridge("bf16"), "FLOP/B", f"{chip.name} bf16 ridge (datasheet)")
    r.data["panel_gpu"] = chip.name
    return chip


def _check_against_datasheet(r: Result, roof: Ceilings, chip) -> None:
    """On a GPU we know: measured ceilings stay under the datasheet's, and the device agrees with the data file."""
    if chip is None:
        return
    props = torch.cuda.get_device_properties(0)
    r.claim(
        f"{chip.name}: measured matmul ceiling at most the dense bf16 peak",
        roof.peak_flops,
        chip.peak_flops("bf16"),
        relation="<=",
        rel_tol=0.02,
        unit="FLOP/s",
        kind="timing",
    )
    r.claim(
        f"{chip.name}: measured memory ceiling at most the HBM bandwidth",
        roof.bytes_per_s,
        chip.hbm_bytes_per_s,
        relation="<=",
        rel_tol=0.02,
        unit="B/s",
        kind="timing",
    )
    r.claim(f"{chip.name}: device SM count = data file", props.multi_processor_count, chip.sms)
    l2 = getattr(props, "L2_cache_size", None)
    if l2:
        r.claim(f"{chip.name}: device L2 size = data file", l2, chip.l2_bytes, unit="B")
    r.add(
        "peak_fraction",
        roof.peak_flops / chip.peak_flops("bf16"),
        "fraction",
        "measured matmul ceiling / datasheet dense bf16 peak",
    )
    r.add(
        "bw_fraction",
        roof.bytes_per_s / chip.hbm_bytes_per_s,
        "fraction",
        "measured memory ceiling / datasheet HBM bandwidth",
    )


def _figures(r: Result, roof: Ceilings, pts: list[dict], sweep: list, chip, device: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    markers = {"large GEMM": "s", "elementwise add": "o", "batch-1 matvec": "^"}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    here = "one core of the build machine" if device == "cpu" else device_name(device)
    _roof_axes(axes[0], roof, f"{here}: measured ceilings")
    for p in pts:
        axes[0].plot(p["intensity"], p["flops_per_s"], markers[p["name"]], ms=8, label=f"{p['name']} (measured)")
    axes[0].legend(fontsize=7, loc="lower right")
    sheet = ceilings(chip.name, "bf16")
    _roof_axes(axes[1], sheet, f"{chip.name}: datasheet dense bf16 roofline")
    b = BYTES_PER_ELEMENT[r.data["dtype"]]
    for p in pts:  # the same shapes in bf16, at the roof they could reach
        i = p["intensity"] * b / 2
        axes[1].plot(i, sheet.attainable(i), markers[p["name"]], ms=8, mfc="none", label=f"{p['name']} (bound)")
    if device == "cuda":  # this GPU's own kernels on its datasheet roofline
        for p in pts:
            axes[1].plot(
                p["intensity"], p["flops_per_s"], markers.get(p["name"], "x"), ms=8, label=f"{p['name']} measured"
            )
        axes[1].set_title(axes[1].get_title() + f"\nfilled: measured on {device_name(device)}", fontsize=8)
    axes[1].legend(fontsize=7, loc="lower right")
    r.figure(
        "roofline",
        fig,
        "Left: the roofline of the machine that built this page, with its measured ceilings "
        "and the three kernels. Right: a datacenter GPU's roofline from its datasheet; hollow markers are where "
        "the same shapes in bf16 would sit at best, filled ones this GPU's measurements on a GPU run",
    )

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    _roof_axes(axes[0], roof, f"Square GEMM sweep, {here}")
    axes[0].plot([p[2] for p in sweep], [p[3] for p in sweep], "o-", label="batched n x n GEMM (measured)")
    for s, _, i, f, _ in sweep:
        axes[0].annotate(str(s), (i, f), fontsize=7, textcoords="offset points", xytext=(3, -10))
    axes[0].legend(fontsize=7, loc="lower right")
    ns = [2**k for k in range(3, 15)]
    axes[1].loglog(ns, [square_gemm_intensity(s, 2) for s in ns], "k.-", label="bf16 n x n GEMM: 2n/3b = n/3")
    for name in gpu_names():
        axes[1].axhline(
            gpu(name).ridge("bf16"), lw=0.8, ls="--", color=f"C{gpu_names().index(name)}", label=f"{name} bf16 ridge"
        )
    axes[1].set_xlabel("n")
    axes[1].set_ylabel("FLOP per byte")
    axes[1].set_title("GEMM intensity grows with n and crosses each ridge", fontsize=9)
    axes[1].legend(fontsize=7)
    r.figure(
        "sweep",
        fig,
        "Left: square GEMMs of growing n on this machine, each call streaming far more data than "
        "the caches hold; right: the same intensity in bf16 against each datasheet ridge",
    )


def _roof_axes(ax, roof: Ceilings, title: str) -> None:
    xs = sorted([2.0**k for k in range(-6, 15)] + [roof.ridge])
    ax.loglog(xs, [roof.attainable(x) for x in xs], "k-", lw=1.5)
    ax.axvline(roof.ridge, color="grey", lw=0.6, ls=":")
    ax.annotate(f"ridge {roof.ridge:.3g} FLOP/B", (roof.ridge, roof.peak_flops / 30), fontsize=7, rotation=90)
    ax.set_xlabel("arithmetic intensity (FLOP per byte)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="major", lw=0.3)
