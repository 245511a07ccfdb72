"""Accelerators as the rest of distlab sees them: peaks, memory, SRAM and links from distlab/data/gpus.toml.

The data file holds what datasheets print; this module derives everything else (bytes, bytes per second,
unidirectional link bandwidth, the ridge point) so no derived number is ever typed. Each chip names its
GPU-to-GPU link, whose bandwidth lives in distlab/data/interconnect.toml (read via distlab.hardware.collectives).
The planner and the calculators call `gpu(name)`; the roofline and FlashAttention chapters call
`GPU.ridge(dtype)`.

The ridge point of a chip for a dtype is peak FLOP/s divided by HBM bytes/s: a kernel that does fewer
FLOPs per byte it moves than this is memory-bound on that chip, one that does more is compute-bound
(Williams, Waterman, Patterson 2009, "Roofline: an insightful visual performance model").
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from distlab.core.cli import command, emit, parser
from distlab.core.facts import entries, fact
from distlab.hardware.links import per_direction_bytes_per_s

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
# dtype -> the data file's field for its dense peak (fp32 is the vector units' rate, the others tensor cores)
PEAK_FIELDS = {
    "fp32": "fp32_tflops",
    "tf32": "tf32_dense_tflops",
    "bf16": "bf16_dense_tflops",
    "fp16": "fp16_dense_tflops",
    "fp8": "fp8_dense_tflops",
}
BYTES_PER_ELEMENT = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
KIB, MIB = 2**10, 2**20  # on-chip SRAM sizes are printed in binary units (a "50 MB" L2 is 50 MiB)


@dataclass(frozen=True, kw_only=True)
class GPU:
    """One accelerator. Bytes are bytes, rates are per second, peaks are dense (no 2:4 sparsity)."""

    name: str
    """The data file's key, e.g. "H100-SXM"."""
    title: str
    """Marketing name, e.g. "NVIDIA H100 SXM5 80 GB"."""
    vendor: str
    sms: int
    """Streaming multiprocessors (NVIDIA) or compute units (AMD)."""
    hbm_bytes: float
    hbm_bytes_per_s: float
    l2_bytes: int
    smem_per_sm_bytes: int
    """Most programmer-managed SRAM one SM gives a kernel (shared memory / LDS)."""
    link_bytes_per_s: float
    """GPU-to-GPU bandwidth per GPU, one direction (printed figures add both directions)."""
    link_name: str
    peaks: dict[str, float] = field(default_factory=dict, hash=False)
    """dtype -> dense peak FLOP/s; a dtype the chip has no fast path for is absent."""
    bf16_sparse_flops: float = 0.0
    """The datasheet's with-sparsity bf16 figure (only to show what confusing it with dense does)."""

    def __post_init__(self) -> None:
        for name in ("sms", "hbm_bytes", "hbm_bytes_per_s", "l2_bytes", "smem_per_sm_bytes", "link_bytes_per_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"GPU {self.name}: {name} must be positive, got {getattr(self, name)}")
        unknown = set(self.peaks) - set(DTYPES)
        if unknown:
            raise ValueError(f"GPU {self.name}: unknown dtypes {sorted(unknown)}; known: {', '.join(DTYPES)}")

    def peak_flops(self, dtype: str = "bf16") -> float:
        """Dense peak FLOP/s for `dtype` (fp32 = vector units; tf32/bf16/fp16/fp8 = tensor cores)."""
        _check_dtype(dtype)
        if dtype not in self.peaks:
            raise ValueError(f"{self.name} has no {dtype} tensor-core path; it has {', '.join(self.peaks)}")
        return self.peaks[dtype]

    def ridge(self, dtype: str = "bf16") -> float:
        """FLOP per HBM byte at which the compute roof meets the memory roof."""
        return self.peak_flops(dtype) / self.hbm_bytes_per_s

    @property
    def smem_total_bytes(self) -> int:
        """Shared memory of the whole chip: every SM's carve-out added up."""
        return self.sms * self.smem_per_sm_bytes


def _check_dtype(dtype: str) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")


def gpu_names() -> list[str]:
    """Every accelerator in the data file, in file order."""
    return list(entries("gpus"))


@functools.cache
def gpu(name: str) -> GPU:
    """The accelerator called `name` (case-insensitive). Unknown names raise ValueError listing the known."""
    known = gpu_names()
    key = next((k for k in known if k.lower() == name.strip().lower()), None)
    if key is None:
        raise ValueError(f"unknown GPU {name!r}; known: {', '.join(known)}")
    row = entries("gpus")[key]

    def value(field_name: str):
        return fact(f"gpus.{key}.{field_name}").value  # fact() insists every value has a source

    peaks = {dt: value(f) * 1e12 for dt, f in PEAK_FIELDS.items() if f in row}
    link = value("link")  # the chip's GPU-to-GPU link: an entry of interconnect.toml
    return GPU(
        name=key,
        title=value("name"),
        vendor=value("vendor"),
        sms=value("sms"),
        hbm_bytes=value("hbm_gb") * 1e9,
        hbm_bytes_per_s=value("hbm_tbps") * 1e12,
        l2_bytes=round(value("l2_mib") * MIB),
        smem_per_sm_bytes=round(value("smem_per_sm_kib") * KIB),
        link_bytes_per_s=per_direction_bytes_per_s(link),
        link_name=fact(f"interconnect.{link}.name").text(),
        peaks=peaks,
        bf16_sparse_flops=value("bf16_sparse_tflops") * 1e12,
    )


# ---------------------------------------------------------------- relations that guard the data file
# Sizes of one HBM stack as JEDEC's HBM2e, HBM3 and HBM3e generations make them (GB): capacity / stacks is one.
HBM_STACK_GB = (8, 16, 24, 32, 36)
MEBIBYTE = 1_048_576  # 2^20 written out: the references below do not share MIB with the conversions they check


def printed_half_unit(x: float) -> float:
    """Half a unit of the last digit a source prints for `x`, as the data file types it: 3.35 -> 0.005,
    2614.9 -> 0.05, 312 -> 0.5, 1100 -> 50 (an integer's trailing zeros are not significant: "1.1 PFLOP/s"). A datum
    must equal its independent re-derivation to within this, so a typo of one in its last digit breaks the relation."""
    if float(x).is_integer():
        digits = str(int(x))
        zeros = len(digits) - len(digits.rstrip("0")) if int(x) else 0
        return 0.5 * 10.0**zeros
    return 0.5 * 10.0 ** -len(repr(float(x)).split(".")[1])


def data_claims(r, names: list[str]) -> None:
    """Relations the datasheet figures must satisfy, so that a typo in gpus.toml breaks chapter 2's build: each
    compares the data file's value with one computed from OTHER sourced values (a second source, aggregate =
    per-unit x count, ratios the datasheets print), never with itself, within half a unit of the digit printed
    (`printed_half_unit`). Every experiment whose page shows numbers made from a chip's data calls it for that chip
    (`r` is its Result), so the typo fails that page's build."""
    rows = entries("gpus")
    for g in (gpu(name) for name in names):
        row = rows[g.name]
        if "fp8" in g.peaks:
            r.claim(
                f"{g.name}: fp8 = 2 x bf16",
                g.peak_flops("fp8"),
                2 * g.peak_flops("bf16"),
                rel_tol=1e-3,
                unit="FLOP/s",
            )
        r.claim(
            f"{g.name}: tf32 = bf16 / 2",
            g.peak_flops("tf32"),
            g.peak_flops("bf16") / 2,
            abs_tol=(printed_half_unit(row["tf32_dense_tflops"]) + printed_half_unit(row["bf16_dense_tflops"]) / 2)
            * 1e12,  # B200: 1.1 PFLOP/s printed against 2.25 / 2
            unit="FLOP/s",
        )
        if "mlperf_memory_gb" in row:
            r.claim(
                f"{g.name}: HBM = MLPerf's capacity",
                g.hbm_bytes,
                row["mlperf_memory_gb"] * 1e9,
                abs_tol=printed_half_unit(row["mlperf_memory_gb"]) * 1e9,
                unit="B",
            )
        if "fp32_lanes_per_sm" in row:
            r.claim(f"{g.name}: FP32 lanes = SMs x lanes per SM", row["fp32_lanes"], g.sms * row["fp32_lanes_per_sm"])
        elif "fp32_lanes" in row:
            per_sm = row["fp32_lanes"] / g.sms
            r.claim(
                f"{g.name}: FP32 lanes / CUs = {per_sm:g}, one of 64 and 128",
                per_sm if per_sm in (64, 128) else -1,
                per_sm,
            )
        if "boost_clock_mhz" in row and g.vendor == "NVIDIA":
            r.claim(
                f"{g.name}: fp32 = lanes x 2 x boost clock",
                g.peak_flops("fp32"),
                row["fp32_lanes"] * 2 * row["boost_clock_mhz"] * 1e6,
                abs_tol=printed_half_unit(row["fp32_tflops"]) * 1e12,  # printed rounded (H100: 66.9 as 67)
                unit="FLOP/s",
            )
        if "peak_engine_clock_mhz" in row:  # AMD: CUs x FLOP per clock per CU x peak engine clock
            for dt in ("fp32", "bf16", "fp8"):
                per_cu = row[f"{dt}_flops_per_clock_per_cu"]
                r.claim(
                    f"{g.name}: {dt} = CUs x {per_cu} x clock",
                    g.peak_flops(dt),
                    g.sms * per_cu * row["peak_engine_clock_mhz"] * 1e6,
                    abs_tol=printed_half_unit(row[PEAK_FIELDS[dt]]) * 1e12,
                    unit="FLOP/s",
                )
        if "hbm_stacks" in row:
            per_stack = g.hbm_bytes / 1e9 / row["hbm_stacks"]
            r.claim(
                f"{g.name}: HBM / stacks = {per_stack:g} GB, a JEDEC size",
                per_stack if per_stack in HBM_STACK_GB else -1,
                per_stack,
                unit="GB",
            )
        if "hbm_bus_bits" in row:  # bytes per transfer x transfers per second (a memory clock moves two)
            if "hbm_gtransfers_per_s" in row:  # AMD prints the transfer rate per pin
                per_s = row["hbm_gtransfers_per_s"] * 1e9
            else:
                per_s = 2 * row["hbm_clock_mhz"] * 1e6
            r.claim(
                f"{g.name}: HBM bandwidth = bus x transfer rate",
                g.hbm_bytes_per_s,
                row["hbm_bus_bits"] / 8 * per_s,
                abs_tol=printed_half_unit(row["hbm_tbps"]) * 1e12,  # printed 3.35 TB/s; the clocks give 3.352
                unit="B/s",
            )
        if "xcds" in row:
            r.claim(f"{g.name}: CUs = XCDs x CUs per XCD", g.sms, row["xcds"] * row["cus_per_xcd"])
            per_xcd = row["l2_mib_per_xcd"] * MEBIBYTE
            r.claim(f"{g.name}: L2 = XCDs x L2 per XCD", g.l2_bytes, row["xcds"] * per_xcd, unit="B")
        if "lds_per_cu_kib_isa" in row:
            r.claim(f"{g.name}: LDS = the ISA guide's", g.smem_per_sm_bytes, row["lds_per_cu_kib_isa"] * 1024, unit="B")
        if "smem_per_block_optin_kib" in row:
            r.claim(
                f"{g.name}: smem per SM = opt-in + reserved",
                g.smem_per_sm_bytes,
                (row["smem_per_block_optin_kib"] + row["smem_reserved_per_block_kib"]) * 1024,
                unit="B",
            )
        if "rack_gpus" in row:  # one GPU of a rack: the rack's printed totals / its GPUs
            n = row["rack_gpus"]
            for what, field, datum, total, scale, unit in (
                ("HBM", "hbm_gb", g.hbm_bytes, row["rack_hbm_tb"] * 1e12, 1e9, "B"),
                ("HBM bandwidth", "hbm_tbps", g.hbm_bytes_per_s, row["rack_hbm_tbps"] * 1e12, 1e12, "B/s"),
                ("fp32", "fp32_tflops", g.peak_flops("fp32"), row["rack_fp32_tflops"] * 1e12, 1e12, "FLOP/s"),
                (
                    "tf32",
                    "tf32_dense_tflops",
                    g.peak_flops("tf32"),
                    row["rack_tf32_sparse_pflops"] * 1e15 / 2,
                    1e12,
                    "FLOP/s",
                ),
            ):
                r.claim(
                    f"{g.name}: {what} = rack / {n}",
                    datum,
                    total / n,
                    abs_tol=printed_half_unit(row[field]) * scale,  # the per-GPU figure's printed precision
                    unit=unit,
                )
    if "H200" in names:
        _hopper_claims(r, rows)
    if "H100-SXM" in names and "A100-SXM-80GB" in names:
        ratio = rows["H100-SXM"]["l2_over_a100"]
        r.claim(
            f"H100 L2 / A100 L2 = the printed {ratio:g}x",
            gpu("H100-SXM").l2_bytes / gpu("A100-SXM-80GB").l2_bytes,
            ratio,
            abs_tol=printed_half_unit(ratio),
        )
    if "GB200" in names and "B200" in names:
        gb200, b200 = gpu("GB200"), gpu("B200")
        same = (("SMs", "sms", ""), ("L2", "l2_bytes", "B"), ("smem per SM", "smem_per_sm_bytes", "B"))
        for what, attr, unit in same:  # the stated assumption gb200-as-b200
            r.claim(f"GB200 {what} = B200's (assumed)", getattr(gb200, attr), getattr(b200, attr), unit=unit)


def _hopper_claims(r, rows: dict) -> None:
    """H200 against H100: the same GH100 processor with more memory; L2 against the whitepaper's printed figures."""
    h100, h200 = gpu("H100-SXM"), gpu("H200")
    r.claim(
        "H200 / H100 HBM bandwidth = the printed 1.4x",
        h200.hbm_bytes_per_s / h100.hbm_bytes_per_s,
        rows["H200"]["hbm_tbps_over_h100"],
        abs_tol=0.05,  # printed to one decimal
    )
    for dt in h100.peaks:  # the same GH100 processor: the H200 changes only the memory
        r.claim(f"H200 {dt} = H100 {dt} (same die)", h200.peak_flops(dt), h100.peak_flops(dt), unit="FLOP/s")
    r.claim("H200 SMs (device query) = H100 SMs (whitepaper)", h200.sms, h100.sms)
    r.claim("H200 smem per SM = H100's", h200.smem_per_sm_bytes, h100.smem_per_sm_bytes, unit="B")
    r.claim(
        "H200 L2 (device query) = the full GH100's (whitepaper)",
        h200.l2_bytes,
        rows["H200"]["gh100_full_l2_mib"] * MEBIBYTE,
        unit="B",
    )


# Device names as torch reports them -> data-file entries. Variants we do not have data for (PCIe cards,
# NVL, 40 GB A100) match nothing rather than the wrong row.
_DEVICE_PATTERNS = [
    ("H200", "H200"),
    ("H100", "H100-SXM"),
    ("A100", "A100-SXM-80GB"),
    ("B200", "B200"),
    ("MI300X", "MI300X"),
]
_EXCLUDE = ("PCIE", "NVL", "40GB", "GH200", "GB200")


def match_device(device_name: str) -> GPU | None:
    """The data-file entry for a device name such as "NVIDIA H100 80GB HBM3", or None when we have none."""
    upper = device_name.upper()
    if any(x in upper for x in _EXCLUDE):
        return None
    for pattern, key in _DEVICE_PATTERNS:
        if pattern in upper:
            return gpu(key)
    return None


@command("gpus", "list the accelerators in the hardware data: peaks, memory, SRAM, links, ridge points")
def gpus_command(argv: list[str]) -> int:
    p = parser("gpus", "The accelerators in distlab/data/gpus.toml with their derived ridge points.")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    a = p.parse_args(argv)
    chips = [gpu(name) for name in gpu_names()]
    obj = [
        {
            "name": g.name,
            "title": g.title,
            "vendor": g.vendor,
            "sms": g.sms,
            "hbm_bytes": g.hbm_bytes,
            "hbm_bytes_per_s": g.hbm_bytes_per_s,
            "l2_bytes": g.l2_bytes,
            "smem_per_sm_bytes": g.smem_per_sm_bytes,
            "link_name": g.link_name,
            "link_bytes_per_s": g.link_bytes_per_s,
            "peak_flops": dict(g.peaks),
            "ridge": {dt: g.ridge(dt) for dt in g.peaks},
        }
        for g in chips
    ]
    head = (
        f"{'name':<15}{'SMs':>5}{'HBM GB':>8}{'TB/s':>6}{'bf16 TF':>9}{'fp8 TF':>8}{'fp32 TF':>9}"
        f"{'L2 MiB':>8}{'smem KiB':>9}{'link GB/s (1 dir)':>19}{'ridge bf16':>12}"
    )
    lines = [head] + [
        f"{g.name:<15}{g.sms:>5}{g.hbm_bytes / 1e9:>8g}{g.hbm_bytes_per_s / 1e12:>6g}"
        f"{g.peak_flops('bf16') / 1e12:>9g}{_tflops(g, 'fp8'):>8}"
        f"{g.peak_flops('fp32') / 1e12:>9g}{g.l2_bytes / 2**20:>8g}{g.smem_per_sm_bytes / 2**10:>9g}"
        f"{g.link_bytes_per_s / 1e9:>19g}{g.ridge('bf16'):>12.0f}"
        for g in chips
    ]
    emit(obj, a.json, "\n".join(lines) + "\n\nDense peaks (no 2:4 sparsity); sources in distlab/data/gpus.toml.")
    return 0


def _tflops(g, dtype: str) -> str:
    return f"{g.peaks[dtype] / 1e12:g}" if dtype in g.peaks else "-"
