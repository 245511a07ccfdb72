"""Compile Triton kernels ahead of time for NVIDIA GPUs on a machine without one, and read what came out.

`compile_jobs(builder, jobs)` (in the calling process, no triton import) starts one child interpreter with
TRITON_INTERPRET=0 (the interpreter switch must be off before triton is imported, and torch imports triton early,
so it cannot be done in a process that already imported torch) and a private TRITON_CACHE_DIR and TMPDIR in a
temporary folder that is deleted afterwards, so nothing reaches the user's ~/.triton. The child compiles the jobs on
a pool of `workers` processes and writes JSON; the caller gets one dict per job.

Each job is compiled the way a real launch compiles it: the kernel's own binder (`create_function_from_signature`,
what `kernel[grid](...)` calls) turns example arguments into Triton's specialisation (an int argument equal to 1
becomes a constant, ints and pointers divisible by 16 get a divisibility hint), and `JITFunction._pack_args` turns
that into the signature, constants and attributes handed to `triton.compile`. Those hints decide whether loads can
be vectorised and so whether the software pipeliner can turn them into asynchronous copies: a signature typed by
hand ("*bf16", "i32") compiles too, but without them (`specialize=False` keeps that path for comparison).

What is read back, per kernel: PTX opcode counts, SASS opcode counts (cuobjdump --dump-sass on the cubin), registers
and stack from the cubin (cuobjdump --dump-resource-usage), spill bytes from ptxas' own report (TRITON_DUMP_PTXAS_LOG),
and the shared memory Triton asks for at launch (metadata.shared). cuobjdump and ptxas are the ones bundled with
triton (triton/backends/nvidia/bin). Tested with triton 3.9.0; `_pack_args` is Triton-internal.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
# PTX tensor-core instruction -> the SASS opcode it becomes: Ampere's warp-level MMA, Hopper's warpgroup MMA,
# Blackwell's tensor-memory MMA (5th-generation tensor cores).
MMA_FAMILIES = {"mma.sync": "HMMA", "wgmma.mma_async": "HGMMA", "tcgen05.mma": "UTCHMMA"}
# Asynchronous global -> shared copies: Ampere's cp.async (SASS LDGSTS) and the TMA's bulk tensor copy (UTMALDG).
ASYNC_COPIES = {"cp.async.cg": "LDGSTS", "cp.async.ca": "LDGSTS", "cp.async.bulk.tensor": "UTMALDG"}
SASS_OPS = sorted(set(MMA_FAMILIES.values()) | set(ASYNC_COPIES.values()))
_SASS_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")
_PTXAS = {
    "stack_frame": r"(\d+) bytes stack frame",
    "spill_stores": r"(\d+) bytes spill stores",
    "spill_loads": r"(\d+) bytes spill loads",
    "ptxas_registers": r"Used (\d+) registers",
}


# ---------------------------------------------------------------- in the child (triton imported)
def compile_kernel(fn, args, kwargs, cc: int, specialize: bool = True):
    """triton.compile of `fn` for sm_<cc> as `fn[grid](*args, **kwargs)` would compile it there."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend

    target = GPUTarget("cuda", cc, 32)
    if specialize:
        from triton.runtime.jit import create_function_from_signature

        backend = make_backend(target)
        binder = create_function_from_signature(fn.signature, fn.params, backend)
        bound, spec, opts = binder(*args, **kwargs)
        options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, spec, opts)
        return triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)
    return triton.compile(
        _plain_source(fn, args, kwargs),
        target=target,
        options={k: v for k, v in kwargs.items() if k not in fn.arg_names},
    )


def _plain_source(fn, args, kwargs):
    """A hand-typed signature: tensors as *dtype, ints as i32, floats as fp32, no hints."""
    from triton.compiler import ASTSource

    values = dict(zip(fn.arg_names, args)) | {k: v for k, v in kwargs.items() if k in fn.arg_names}
    signature, constants = {}, {}
    for param in fn.params:
        v = values[param.name]
        if param.is_constexpr:
            signature[param.name], constants[param.name] = "constexpr", v
        elif hasattr(v, "dtype"):
            signature[param.name] = (
                "*" + {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}[str(v.dtype)]
            )
        else:
            signature[param.name] = "fp32" if isinstance(v, float) else "i32"
    return ASTSource(fn, signature, constants)


def inspect(kernel, cc: int, ptxas_log: str = "") -> dict:
    """What the compiler made of one kernel: opcode counts, registers, stack, spills, shared memory, PTX lines."""
    from triton import knobs

    ptx = kernel.asm["ptx"]
    cuobjdump = knobs.nvidia.cuobjdump.path
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        sass = subprocess.run([cuobjdump, "--dump-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
        usage = subprocess.run(
            [cuobjdump, "--dump-resource-usage", str(cubin)], capture_output=True, text=True, check=True
        ).stdout
    ops = _SASS_LINE.findall(sass)
    res = dict(re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", usage))
    out = {
        "cc": cc,
        "name": kernel.name,
        "num_warps": kernel.metadata.num_warps,
        "num_stages": kernel.metadata.num_stages,
        "shared": kernel.metadata.shared,
        "ptx": {op: ptx.count(op + ".") + ptx.count(op + " ") for op in (*MMA_FAMILIES, *ASYNC_COPIES)},
        "sass": {op: ops.count(op) for op in SASS_OPS},
        "registers": int(res["REG"]),
        "stack": int(res["STACK"]),
        "local": int(res["LOCAL"]),
        "ptx_lines": {op: _first_line(ptx, op) for op in (*MMA_FAMILIES, *ASYNC_COPIES)},
    }
    for key, pattern in _PTXAS.items():
        found = re.search(pattern, ptxas_log)
        out[key] = int(found.group(1)) if found else None
    return out


def _first_line(ptx: str, op: str) -> str:
    """The first PTX instruction of opcode `op` (its predicate guard, if any, dropped)."""
    for line in ptx.splitlines():
        text = re.sub(r"^@!?%\w+\s+", "", line.strip())
        if text.startswith(op + ".") or text.startswith(op + " "):
            return text
    return ""


def _one(job: dict) -> dict:
    """Compile one job in a pool worker: the builder (module:function) returns (fn, args, kwargs, cc, specialize)."""
    module, func = job["builder"].split(":")
    fn, args, kwargs, cc, specialize = getattr(importlib.import_module(module), func)(job)
    start = time.perf_counter()
    log = io.StringIO()
    with contextlib.redirect_stdout(log):  # TRITON_DUMP_PTXAS_LOG prints ptxas' report to stdout
        kernel = compile_kernel(fn, args, kwargs, cc, specialize)
    seconds = time.perf_counter() - start
    return job | inspect(kernel, cc, log.getvalue()) | {"seconds": round(seconds, 2)}


def _child_main() -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from importlib.metadata import version

    payload = json.loads(sys.stdin.read())
    jobs = payload["jobs"]
    # Longest first (the caller's "cost" estimate), so that no worker is left with a long job at the end.
    order = sorted(range(len(jobs)), key=lambda i: -jobs[i].get("cost", 1.0))
    with ProcessPoolExecutor(payload["workers"], mp_context=multiprocessing.get_context("spawn")) as pool:
        done = dict(zip(order, pool.map(_one, [jobs[i] for i in order])))
    results = [done[i] for i in range(len(jobs))]
    Path(payload["out"]).write_text(json.dumps({"results": results, "versions": {"triton": version("triton")}}))


# ---------------------------------------------------------------- in the caller
def compile_jobs(builder: str, jobs: list[dict], workers: int = 2, timeout_s: float = 600) -> tuple[list[dict], dict]:
    """Compile every job in a child interpreter (TRITON_INTERPRET=0, private caches); `builder` is
    "module:function" taking a job dict, a job's optional "cost" orders the work (largest first). Returns (one
    result dict per job, in the jobs' order; {"triton": version})."""
    with tempfile.TemporaryDirectory(prefix="distlab-aot-") as tmp:
        env = dict(os.environ)
        env.update(
            TRITON_INTERPRET="0",
            TRITON_CACHE_DIR=str(Path(tmp) / "cache"),
            TMPDIR=tmp,
            TRITON_DUMP_PTXAS_LOG="1",
            TRITON_DEFAULT_FP_FUSION="1",  # Triton 3.9's default, set to silence its deprecation warning
            TRITON_DISABLE_LINE_INFO="1",  # no ptxas -lineinfo: same code and resources, faster compiles
            OMP_NUM_THREADS="1",
            PYTHONPATH=os.pathsep.join([str(REPO_DIR), env.get("PYTHONPATH", "")]),
        )
        out = Path(tmp) / "out.json"
        payload = {"jobs": [j | {"builder": builder} for j in jobs], "workers": workers, "out": str(out)}
        proc = subprocess.run(
            [sys.executable, "-m", "distlab.attention.triton_aot"],
            input=json.dumps(payload),
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=tmp,
        )
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"ahead-of-time compile failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        data = json.loads(out.read_text())
    return data["results"], data["versions"]


if __name__ == "__main__":
    _child_main()
