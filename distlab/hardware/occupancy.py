"""How many blocks of a kernel fit on one SM at once, from its registers, warps and shared memory.

Two derivations of the same limit, so each can check the other:

- `blocks_per_sm_naive`: the textbook bound. A block needs warps x registers-per-warp registers (a warp gets its
  registers in multiples of `reg_alloc_unit`), `smem + reserved` bytes of shared memory, `warps` warp slots and one
  block slot; the SM has so many of each. The smallest quotient wins.
- `blocks_per_sm`: the way NVIDIA's occupancy calculator (cuda_occupancy.h, cudaOccMaxActiveBlocksPerMultiprocessor)
  counts it: the register file is split evenly among `reg_subpartitions` schedulers and a warp's registers come
  from one of them, so the register limit is (warps that fit in one sub-partition) x sub-partitions / warps per
  block; a block's shared memory is rounded up to `smem_alloc_unit_bytes` after the driver's reserve is added; a
  kernel above the per-thread register cap, or a block above the per-block limits, fits zero times.

The limits come from distlab/data/gpus.toml (`sm_limits(chip)`); pure Python, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from distlab.core.facts import value

WARP_SIZE = 32  # threads per warp on every NVIDIA GPU


@dataclass(frozen=True, kw_only=True)
class SMLimits:
    """Per-SM resources of one GPU (gpus.toml; units in the field names)."""

    chip: str
    """gpus.toml entry."""
    compute_capability: str
    """"8.0", "9.0", "10.0"."""
    regs_per_sm: int
    """32-bit registers in one SM's register file (also the most one block may use)."""
    max_regs_per_thread: int
    """Registers ptxas may give one thread; a kernel at this cap is where spills start."""
    max_blocks_per_sm: int
    """Resident blocks per SM."""
    max_warps_per_sm: int
    """Resident warps per SM."""
    smem_per_sm_bytes: int
    """Shared memory one SM can give its blocks (the largest carve-out)."""
    smem_per_block_optin_bytes: int
    """The most shared memory one block may opt into."""
    smem_reserved_per_block_bytes: int
    """Shared memory the driver keeps for each resident block."""
    reg_alloc_unit: int
    """A warp's registers are allocated in multiples of this."""
    reg_subpartitions: int
    """Sub-partitions (schedulers) the register file is split among."""
    smem_alloc_unit_bytes: int
    """A block's shared memory is allocated in multiples of this."""

    def __post_init__(self) -> None:
        for name in (
            "regs_per_sm",
            "max_regs_per_thread",
            "max_blocks_per_sm",
            "max_warps_per_sm",
            "smem_per_sm_bytes",
            "reg_alloc_unit",
            "reg_subpartitions",
            "smem_alloc_unit_bytes",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{self.chip}: {name} must be > 0, got {getattr(self, name)}")


def sm_limits(chip: str) -> SMLimits:
    """The per-SM limits of a gpus.toml entry that has them (A100-SXM-80GB, H100-SXM, B200)."""
    v = lambda field: value(f"gpus.{chip}.{field}")
    return SMLimits(
        chip=chip,
        compute_capability=v("compute_capability"),
        regs_per_sm=v("regs_per_sm"),
        max_regs_per_thread=v("max_regs_per_thread"),
        max_blocks_per_sm=v("max_blocks_per_sm"),
        max_warps_per_sm=v("max_warps_per_sm"),
        smem_per_sm_bytes=round(v("smem_per_sm_kib") * 1024),
        smem_per_block_optin_bytes=round(v("smem_per_block_optin_kib") * 1024),
        smem_reserved_per_block_bytes=round(v("smem_reserved_per_block_kib") * 1024),
        reg_alloc_unit=v("reg_alloc_unit"),
        reg_subpartitions=v("reg_subpartitions"),
        smem_alloc_unit_bytes=v("smem_alloc_unit_bytes"),
    )


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def _check(regs: int, warps: int, smem_bytes: int) -> None:
    if regs < 0 or warps <= 0 or smem_bytes < 0:
        raise ValueError(f"need regs >= 0, warps > 0, smem >= 0; got {regs}, {warps}, {smem_bytes}")


def regs_per_warp(lim: SMLimits, regs: int) -> int:
    """Registers one warp is given: regs x 32, rounded up to the allocation unit."""
    return _round_up(regs * WARP_SIZE, lim.reg_alloc_unit)


def blocks_per_sm_naive(lim: SMLimits, *, regs: int, warps: int, smem_bytes: int) -> dict[str, int]:
    """Blocks per SM allowed by each resource, and their minimum ("blocks"): the textbook bound."""
    _check(regs, warps, smem_bytes)
    per_block_regs = regs_per_warp(lim, regs) * warps
    per_block_smem = smem_bytes + lim.smem_reserved_per_block_bytes
    limits = {
        "registers": lim.regs_per_sm // per_block_regs if per_block_regs else lim.max_blocks_per_sm,
        "shared": lim.smem_per_sm_bytes // per_block_smem,
        "warps": lim.max_warps_per_sm // warps,
        "blocks": lim.max_blocks_per_sm,
    }
    return limits | {"min": min(limits.values())}


def blocks_per_sm(lim: SMLimits, *, regs: int, warps: int, smem_bytes: int) -> dict[str, int]:
    """Blocks per SM as NVIDIA's occupancy calculator counts them (per register sub-partition, allocation units,
    per-block and per-thread caps); same keys as blocks_per_sm_naive."""
    _check(regs, warps, smem_bytes)
    rpw = regs_per_warp(lim, regs)
    # The hardware check assumes a block's warps are spread over all sub-partitions: round warps up to them.
    assumed = rpw * _round_up(warps, lim.reg_subpartitions)
    if regs > lim.max_regs_per_thread or assumed > lim.regs_per_sm or rpw * warps > lim.regs_per_sm:
        by_regs = 0
    elif rpw == 0:
        by_regs = lim.max_blocks_per_sm
    else:
        warps_per_sub = (lim.regs_per_sm // lim.reg_subpartitions) // rpw
        by_regs = warps_per_sub * lim.reg_subpartitions // warps
    smem = _round_up(smem_bytes + lim.smem_reserved_per_block_bytes, lim.smem_alloc_unit_bytes)
    by_smem = 0 if smem_bytes > lim.smem_per_block_optin_bytes else lim.smem_per_sm_bytes // smem
    limits = {
        "registers": by_regs,
        "shared": by_smem,
        "warps": lim.max_warps_per_sm // warps,
        "blocks": lim.max_blocks_per_sm,
    }
    return limits | {"min": min(limits.values())}


def limiter(limits: dict[str, int]) -> str:
    """Which resource sets the minimum ("registers", "shared", ...; several joined by "+")."""
    return "+".join(k for k in ("registers", "shared", "warps", "blocks") if limits[k] == limits["min"])
