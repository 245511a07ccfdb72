"""Ahead-of-time compiles and occupancy against independent references: instruction counts worked out by hand from
the tile shapes and the PTX ISA's MMA shapes, NVIDIA's own occupancy calculator (cuda_occupancy.h, compiled here
with g++), an occupancy worked by hand, and the per-SM limits against a second source.

Compiles run in a child interpreter (distlab.attention.triton_aot); the few tiny kernels here share one session fixture
(about 10 s). The experiment's own result comes from the build cache when the site was built first.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from distlab.attention.flash_attention_compile import SHAPE, TARGETS, launch_args, short_ptx
from distlab.core import experiments
from distlab.core.facts import fact
from distlab.hardware.occupancy import blocks_per_sm, blocks_per_sm_naive, sm_limits

TINY = textwrap.dedent("""
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def dot_kernel(A, B, C, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
        rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
        a = tl.load(A + rm[:, None] * K + rk[None, :])
        b = tl.load(B + rk[:, None] * N + rn[None, :])
        tl.store(C + rm[:, None] * N + rn[None, :], tl.dot(a, b))


    @triton.jit
    def loop_kernel(A, B, C, K, sam, sak, sbk, sbn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(A + rm[:, None] * sam + (k + rk)[None, :] * sak)
            b = tl.load(B + (k + rk)[:, None] * sbk + rn[None, :] * sbn)
            acc += tl.dot(a, b)
        tl.store(C + rm[:, None] * BN + rn[None, :], acc)


    def build(job):
        t = lambda *s: torch.empty(s, dtype=torch.bfloat16, device="meta")
        c = lambda *s: torch.empty(s, dtype=torch.float32, device="meta")
        if job["kernel"] == "dot":
            m = job["m"]
            return dot_kernel, (t(m, 64), t(64, m), c(m, m)), dict(M=m, N=m, K=64, num_warps=4), job["cc"], True
        a, b = t(128, 1024), t(1024, 128)
        return (loop_kernel, (a, b, c(128, 128), 1024, *a.stride(), *b.stride()),
                dict(BM=128, BN=128, BK=64, num_warps=4, num_stages=job["stages"]), 80, job["specialize"])
""")
DOT_JOBS = [{"kernel": "dot", "m": m, "cc": cc} for m in (64, 128) for cc in TARGETS]
LOOP_JOBS = [
    {"kernel": "loop", "stages": 3, "specialize": True},
    {"kernel": "loop", "stages": 3, "specialize": False},
    {"kernel": "loop", "stages": 2, "specialize": True},
]


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """The tiny kernels compiled once: dot 64^3 and 128x128x64 for each target, a pipelined loop for sm_80."""
    from distlab.attention.triton_aot import compile_jobs

    folder = tmp_path_factory.mktemp("tiny")
    (folder / "tiny_kernels.py").write_text(TINY)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", str(folder))
        results, versions = compile_jobs("tiny_kernels:build", DOT_JOBS + LOOP_JOBS)
    return results, versions


def test_tensor_core_instruction_counts_follow_the_mma_shapes(tiny):
    """C = A B with A (M x 64), B (64 x M), bf16, 4 warps. PTX ISA shapes: sm_80's mma.sync m16n8k16 is issued by
    every warp, so each thread's program has M*M*64 / (16*8*16) / 4 of them; sm_90's wgmma m64nNk16 is issued by the
    warpgroup (the 4 warps) with N up to 256, so (M/64) * (64/16) of them; sm_100's tcgen05.mma is issued once per
    CTA for the whole M <= 128 tile, so 64/16. Would catch a compile for the wrong target (Hopper code built with
    Ampere's mma.sync, the FlashAttention-2-on-H100 trap), or counting that misses or double-counts instructions;
    the SASS count (HMMA/HGMMA/UTCHMMA) must equal the PTX count."""
    results, _ = tiny
    expected = {
        80: lambda m: m * m * 64 // (16 * 8 * 16) // 4,
        90: lambda m: (m // 64) * (64 // 16),
        100: lambda m: 64 // 16,
    }
    ptx_op = {80: "mma.sync", 90: "wgmma.mma_async", 100: "tcgen05.mma"}
    sass_op = {80: "HMMA", 90: "HGMMA", 100: "UTCHMMA"}
    for x in results[: len(DOT_JOBS)]:
        cc, m = x["cc"], x["m"]
        assert x["ptx"][ptx_op[cc]] == expected[cc](m), (cc, m, x["ptx"])
        assert sum(x["ptx"][op] for op in ptx_op.values()) == x["ptx"][ptx_op[cc]], (cc, m, "other families")
        assert x["sass"][sass_op[cc]] == x["ptx"][ptx_op[cc]], (cc, m, x["sass"])
    sm90 = next(x for x in results if x.get("m") == 128 and x["cc"] == 90)
    assert sm90["ptx_lines"]["wgmma.mma_async"].startswith("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16")


def test_the_loop_is_pipelined_only_when_compiled_as_launched(tiny):
    """A 128x128 tile looping over K in steps of 64 (bf16, 4 warps = 128 threads). Compiled with the launch's
    specialisation (stride 1 constant, the others divisible by 16) each stage's A and B tiles, (128*64 + 64*128) * 2
    bytes, travel as 16-byte cp.async: 16 per thread per stage, and with s stages the prologue fills s - 1 and the
    loop one more, so 16 * s in the program. From a hand-typed signature the loads cannot be vectorised and there
    is none. Would catch the NOTES' puzzle coming back (a compile path that silently drops the hints) or a
    pipeliner that stopped multi-buffering."""
    results, _ = tiny
    spec3, plain3, spec2 = results[len(DOT_JOBS) :]
    per_stage = (128 * 64 + 64 * 128) * 2 // 16 // 128
    assert spec3["ptx"]["cp.async.cg"] == per_stage * 3 == spec3["sass"]["LDGSTS"]
    assert spec2["ptx"]["cp.async.cg"] == per_stage * 2
    assert plain3["ptx"]["cp.async.cg"] == plain3["sass"]["LDGSTS"] == 0
    assert spec3["shared"] > spec2["shared"]  # a third buffer


def test_ptxas_and_cuobjdump_agree_on_registers_and_stack(tiny):
    """Two tools read the same cubin: would catch a parser that picks up the wrong number."""
    results, versions = tiny
    assert versions["triton"]
    for x in results:
        assert x["ptxas_registers"] == x["registers"] > 0
        assert x["stack_frame"] == x["stack"]


def test_occupancy_by_hand():
    """H100, the forward at 128x64, 8 warps: 184 registers -> 184 * 32 = 5,888 per warp (a multiple of 256), so a
    16,384-register sub-partition holds 2 warps, 8 per SM: one 8-warp block; 160 KiB + 1 KiB reserved fits
    228 KiB once. And a case where the sub-partitions matter: 192 registers, 3-warp blocks on an A100: 6,144
    registers per warp, 2 warps per sub-partition, 8 per SM, so 2 blocks, although the register file alone would
    hold 65,536 / (3 * 6,144) = 3. Would catch ignoring the allocation unit or the sub-partitions."""
    h100, a100 = sm_limits("H100-SXM"), sm_limits("A100-SXM-80GB")
    occ = blocks_per_sm(h100, regs=184, warps=8, smem_bytes=160 * 1024)
    assert (occ["registers"], occ["shared"], occ["warps"], occ["min"]) == (1, 1, 8, 1)
    assert blocks_per_sm(a100, regs=192, warps=3, smem_bytes=0)["registers"] == 2
    assert blocks_per_sm_naive(a100, regs=192, warps=3, smem_bytes=0)["registers"] == 3
    assert blocks_per_sm(a100, regs=196, warps=8, smem_bytes=65536)["min"] == 1  # 196 * 32 -> 6,400
    assert blocks_per_sm(a100, regs=32, warps=4, smem_bytes=200 * 1024)["min"] == 0  # over the per-block limit


CALCULATOR = textwrap.dedent("""
    #include <cstdio>
    #include "cuda_occupancy.h"
    int main() {
      int major, minor, smem_sm, optin, reserved, regs, warps, smem;
      while (std::scanf("%d %d %d %d %d %d %d %d", &major, &minor, &smem_sm, &optin, &reserved, &regs, &warps,
                        &smem) == 8) {
        cudaOccDeviceProp p;
        p.computeMajor = major; p.computeMinor = minor; p.maxThreadsPerBlock = 1024;
        p.maxThreadsPerMultiprocessor = 2048; p.regsPerBlock = 65536; p.regsPerMultiprocessor = 65536;
        p.warpSize = 32; p.sharedMemPerBlock = 48 * 1024; p.sharedMemPerMultiprocessor = smem_sm; p.numSms = 1;
        p.sharedMemPerBlockOptin = optin; p.reservedSharedMemPerBlock = reserved;
        cudaOccFuncAttributes a;
        a.maxThreadsPerBlock = warps * 32; a.numRegs = regs; a.sharedSizeBytes = 0;
        a.partitionedGCConfig = PARTITIONED_GC_OFF; a.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
        a.maxDynamicSharedSizeBytes = smem; a.numBlockBarriers = 1;
        cudaOccDeviceState s;
        cudaOccResult r;
        int unit = 0, parts = 0, blocks = 0;
        cudaOccRegAllocationGranularity(&unit, &p);
        cudaOccSubPartitionsPerMultiprocessor(&parts, &p);
        cudaOccMaxBlocksPerMultiprocessor(&blocks, &p);
        int err = cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &a, &s, warps * 32, smem);
        std::printf("%d %d %d %d %d\\n", err, r.activeBlocksPerMultiprocessor, unit, parts, blocks);
      }
    }
""")


def _header_dir() -> Path | None:
    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(spec.submodule_search_locations[0]) / "backends" / "nvidia" / "include"
    return folder if (folder / "cuda_occupancy.h").exists() else None


def test_occupancy_equals_nvidias_calculator(tmp_path):
    """NVIDIA's occupancy calculator (cuda_occupancy.h as bundled with triton, compiled with g++) against
    blocks_per_sm over registers, block sizes and shared memory on A100, H100 and B200; it also reports the
    allocation unit, sub-partitions and block cap that gpus.toml states. Would catch any rule of the calculator that
    occupancy.py gets wrong (rounding, the reserve, the per-block opt-in limit, the per-thread cap)."""
    include, cxx = _header_dir(), shutil.which("g++")
    if include is None or cxx is None:
        pytest.skip("needs g++ and triton's bundled cuda_occupancy.h")
    (tmp_path / "occ.cpp").write_text(CALCULATOR)
    subprocess.run(
        [cxx, "-std=c++17", "-O1", f"-I{include}", str(tmp_path / "occ.cpp"), "-o", str(tmp_path / "occ")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    cases, lines = [], []
    for chip in TARGETS.values():
        lim = sm_limits(chip)
        major, minor = (int(p) for p in lim.compute_capability.split("."))
        for regs in (24, 32, 64, 96, 128, 168, 184, 192, 208, 232, 254, 255):
            for warps in (1, 2, 3, 4, 8, 16):
                for smem in (
                    0,
                    4000,
                    48 * 1024,
                    65536 + 100,
                    98304,
                    132096,
                    lim.smem_per_block_optin_bytes,
                    lim.smem_per_block_optin_bytes + 128,
                ):
                    cases.append((lim, regs, warps, smem))
                    lines.append(
                        f"{major} {minor} {lim.smem_per_sm_bytes} {lim.smem_per_block_optin_bytes} "
                        f"{lim.smem_reserved_per_block_bytes} {regs} {warps} {smem}"
                    )
    out = subprocess.run(
        [str(tmp_path / "occ")], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True, timeout=60
    ).stdout.split("\n")
    for (lim, regs, warps, smem), line in zip(cases, out):
        err, blocks, unit, parts, cap = (int(v) for v in line.split())
        if err == 0:
            assert blocks_per_sm(lim, regs=regs, warps=warps, smem_bytes=smem)["min"] == blocks, (
                lim.chip,
                regs,
                warps,
                smem,
            )
        else:  # the calculator refuses a block over the per-block shared-memory limit; so must we (zero blocks)
            assert (
                smem > lim.smem_per_block_optin_bytes
                and blocks_per_sm(lim, regs=regs, warps=warps, smem_bytes=smem)["min"] == 0
            )
        assert (unit, parts, cap) == (lim.reg_alloc_unit, lim.reg_subpartitions, lim.max_blocks_per_sm)
    assert len(out) - 1 == len(cases)


# NVIDIA's CCCL table (libcudacxx/include/cuda/__device/arch_traits.h @ efee2cf), typed here: threads per SM and
# the reserve; shared memory per SM comes from gpus.toml's other source (the programming guide).
CCCL = {
    "A100-SXM-80GB": dict(threads=2048, smem_kib=164),
    "H100-SXM": dict(threads=2048, smem_kib=228),
    "B200": dict(threads=2048, smem_kib=228),
}


@pytest.mark.parametrize("chip", sorted(CCCL))
def test_per_sm_limits_against_a_second_source(chip):
    """gpus.toml's smem_per_sm_kib cites the programming guide, the per-block opt-in and the reserve cite CCCL:
    opt-in + reserve must give the SM's shared memory (CCCL defines it so), and warps x 32 CCCL's threads per SM.
    Would catch a typo in either, or an entry that mixes up KB and KiB."""
    lim = sm_limits(chip)
    assert lim.smem_per_block_optin_bytes + lim.smem_reserved_per_block_bytes == lim.smem_per_sm_bytes
    assert lim.smem_per_sm_bytes == CCCL[chip]["smem_kib"] * 1024
    assert lim.max_warps_per_sm * 32 == CCCL[chip]["threads"]
    for field in ("regs_per_sm", "max_regs_per_thread", "reg_alloc_unit", "compute_capability"):
        f = fact(f"gpus.{chip}.{field}")
        assert f.source.title and (f.source.url or f.source.detail)


def test_launch_args_are_what_the_launcher_passes():
    """The recorded forward launch: contiguous (B, H, N, d) strides worked out here, the config's blocks, warps and
    stages, causal, and tf32 dots for bf16 on a GPU. Would catch a recorder that drifted from flash_forward."""
    b, h, n, d = SHAPE
    fn, args, kwargs = launch_args("fwd", (128, 32, 8, 3))
    assert fn.__name__ == "_fwd_kernel"
    strides = (h * n * d, n * d, d, 1)
    assert args[6:22] == strides * 4 and args[22:] == (h, n)
    assert (kwargs["BLOCK_M"], kwargs["BLOCK_N"], kwargs["num_warps"], kwargs["num_stages"]) == (128, 32, 8, 3)
    assert kwargs["CAUSAL"] is True and kwargs["HEAD_DIM"] == d
    fn, args, kwargs = launch_args("dq", (64, 64, 4, 3))
    assert fn.__name__ == "_bwd_dq_kernel" and kwargs["BLOCK_M"] == 64


def test_short_ptx_cuts_only_long_register_lists():
    op = "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"
    line = f"{op} {{ %r1, %r2, %r3, %r4 }}, %rd1, {{ %r9, %r8, %r7 }};"
    assert short_ptx(line) == f"{op} {{ %r1, %r2, … }}, %rd1, {{ %r9, %r8, %r7 }};"  # 3 registers stay whole


def test_experiment_claims_hold():
    """The experiment itself (from the build cache when the page was built first): every claim passes and the table
    has one row per kernel x config per target. Would catch a config added to the autotuner that spills, does not
    fit shared memory, or compiles to the wrong instructions."""
    result, _ = experiments.run("flash-attention-compile")
    assert not result.failed_claims, [c.describe() for c in result.failed_claims]
    rows = sum(len(result.tables[f"sm_{cc}"].rows) for cc in TARGETS)
    assert rows == result.quantities["compiles"].value


def test_tutorial_matmul_counts_follow_its_tiles():
    """triton_compile.toml's tutorial matmul (128 x 128 x 64 fp16 tiles, 4 warps = 128 threads, 3 stages, per its
    source): one stage's A and B tiles, (128*64 + 64*128) * 2 bytes, move as 16-byte cp.async, 16 per thread, and
    3 stages issue 48 (2 in the prologue, 1 in the loop); 3 - 1 = 2 tile pairs are in flight in shared memory, 64 KiB,
    where the plain compile stages a single pair, 32 KiB. Would catch a mistyped count in the data file."""
    per_stage = (128 * 64 + 64 * 128) * 2 // 16 // 128
    assert fact("triton_compile.matmul.cp_async_sm80").value == per_stage * 3
    assert fact("triton_compile.matmul.cp_async_sm90").value == per_stage * 3
    assert fact("triton_compile.matmul.cp_async_plain_sm80").value == 0
    assert fact("triton_compile.matmul.shared_sm80_kib").value == 2 * (128 * 64 + 64 * 128) * 2 // 1024
    assert fact("triton_compile.matmul.shared_plain_sm80_kib").value == (128 * 64 + 64 * 128) * 2 // 1024
