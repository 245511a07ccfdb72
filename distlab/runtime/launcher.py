"""One launcher for every multi-process experiment: run `fn(rank, world_size, *args)` on real
torch.distributed processes and return each rank's result.

- Locally it starts `world_size` processes (gloo on CPU; NCCL on CUDA when there is one GPU per rank,
  gloo over the GPUs otherwise, because NCCL refuses two ranks on one GPU). The rendezvous store is
  opened by the launcher itself on a port the kernel picks (port 0), so two launches at once can never
  race for a port. A rank that raises, dies or hangs past the deadline is named in a one-line
  LaunchError (a hung rank with the file and line it was stuck at), and every process is stopped.
- No orphans: each rank asks the kernel to kill it when its parent dies (PR_SET_PDEATHSIG) and checks
  that the launcher is still alive after asking, so even a launcher killed with SIGKILL leaves nothing.
- Processes come from a fork server that has already imported torch (DISTLAB_START_METHOD=spawn for
  fresh interpreters): a world of 4 starts in ~0.1 s instead of ~5 s. Each rank gets the launcher's
  environment as it is at launch time, and imports `fn`'s module only after that.
- Under `torchrun` (RANK and WORLD_SIZE set) it runs `fn` in the current process on the group that
  torchrun set up and all-gathers the results (or the failing rank's error), so the same experiment
  code runs on a real cluster.

`fn` must be importable (a module-level function of a module, not a lambda). A script that defines `fn`
itself is imported again by every rank, so it needs the usual `if __name__ == "__main__":` guard around its
launch() call (the launcher says so when a rank dies that way). Results travel as plain pickles: return
Python numbers, lists, dicts or CPU tensors.
"""

from __future__ import annotations

import atexit
import ctypes
import multiprocessing as mp
import os
import pickle
import queue
import re
import signal
import tempfile
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

START_METHOD_ENV = "DISTLAB_START_METHOD"  # "forkserver" (default where available) or "spawn"
_HOST = "127.0.0.1"
_TORCH_DIR = str(Path(torch.__file__).resolve().parent)


class LaunchError(RuntimeError):
    """A rank failed, died or hung. The message is one line naming it; `details` holds the rank's full
    traceback (or stack) when there is one."""

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details


def default_backend(device: str, world_size: int | None = None) -> str:
    """NCCL on CUDA when every rank can have its own GPU, gloo otherwise."""
    if device == "cuda" and (world_size is None or torch.cuda.device_count() >= world_size):
        return "nccl"
    return "gloo"


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and "DISTLAB_SPAWNED" not in os.environ


def launch(
    fn, world_size: int, *args, device: str = "cpu", backend: str | None = None, timeout_s: float = 120.0
) -> list:
    """Run fn(rank, world_size, *args) on `world_size` processes; return results in rank order."""
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an integer >= 1, got {world_size!r}")
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
    backend = backend or default_backend(device, world_size)
    if under_torchrun():
        return _run_under_torchrun(fn, world_size, args, device, backend, timeout_s)
    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise ValueError(
            f"NCCL needs one GPU per rank: {world_size} ranks, {torch.cuda.device_count()} GPUs "
            "(pass backend='gloo' to share GPUs)"
        )
    try:
        payload = pickle.dumps((fn, args))
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        raise ValueError(f"launch: fn and its arguments must be picklable (a module-level function): {exc}") from None
    ctx = _context()
    store = dist.TCPStore(_HOST, 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=timeout_s))
    results_q = ctx.Queue()
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="distlab-launch-") as tmp:
        stacks = [os.path.join(tmp, f"rank{r}.stack") for r in range(world_size)]
        procs = [
            ctx.Process(
                target=_worker,
                name=f"distlab-rank{r}",
                args=(
                    payload,
                    r,
                    world_size,
                    device,
                    backend,
                    store.port,
                    timeout_s,
                    env,
                    os.getpid(),
                    stacks[r],
                    results_q,
                ),
            )
            for r in range(world_size)
        ]
        try:
            for p in procs:
                p.start()
            return _collect(procs, results_q, world_size, timeout_s, stacks, store)
        except LaunchError as exc:
            if getattr(fn, "__module__", "") == "__main__" and "before returning a result" in str(exc):
                raise LaunchError(
                    f"{exc}; fn lives in a script, which every rank imports again: the script "
                    "needs its launch() call under `if __name__ == '__main__':`",
                    exc.details,
                ) from None
            raise
        finally:
            _stop(procs)
            results_q.close()
            results_q.join_thread()
            del store


def _context():
    method = os.environ.get(START_METHOD_ENV, "forkserver")
    if method not in ("forkserver", "spawn"):
        raise ValueError(f"{START_METHOD_ENV} must be forkserver or spawn, not {method!r}")
    if method not in mp.get_all_start_methods():
        method = "spawn"
    ctx = mp.get_context(method)
    if method == "forkserver":
        # Import torch once in the server (never '__main__': a script without a main guard would re-run).
        ctx.set_forkserver_preload(["torch", "torch.distributed", "distlab.runtime.launcher"])
    return ctx


def _collect(procs, results_q, world_size: int, timeout_s: float, stacks: list[str], store) -> list:
    """Results in rank order. The deadline is startup_seconds(timeout_s) for the world to come up (every rank past
    init), then timeout_s from that moment for fn: starting ranks takes 0.1 s on an idle machine and 10 s on a loaded
    one, and that must not eat fn's budget (a hang would be reported for ranks that were only slow to start, and the
    rank named from stacks taken inside start-up)."""
    results: dict[int, object] = {}
    deadline = time.monotonic() + startup_seconds(timeout_s)
    up_keys, up = [f"distlab/up/{r}" for r in range(world_size)], False
    while len(results) < world_size:
        try:
            msg = results_q.get(timeout=0.1)
        except queue.Empty:
            _check_exits(procs, results, results_q, world_size)
            if not up and store.check(up_keys):
                up, deadline = True, time.monotonic() + timeout_s
            if time.monotonic() > deadline:
                _raise_hung(procs, results, world_size, timeout_s, stacks)
            continue
        _take(msg, procs, results, results_q, world_size)
    for p in procs:  # ranks tear their process group down, then exit
        p.join(timeout=max(1.0, deadline - time.monotonic()))
    return [results[r] for r in range(world_size)]


def _take(msg, procs, results: dict, results_q, world_size: int) -> None:
    status, rank, payload, details = msg
    if status == "error":
        _raise_root_cause(procs, results, results_q, world_size, [(rank, payload, details)])
    results[rank] = pickle.loads(payload)


def _check_exits(procs, results: dict, results_q, world_size: int) -> None:
    """A rank that exited without a result: drain what it may have sent just before, then name it."""
    gone = [r for r, p in enumerate(procs) if r not in results and p.exitcode is not None]
    if not gone:
        return
    try:
        while True:  # a loaded machine can be slow to deliver a result sent just before its rank exited
            _take(results_q.get(timeout=1.0), procs, results, results_q, world_size)
    except queue.Empty:
        pass
    for r in gone:
        if r not in results:
            raise LaunchError(_died(procs, r, world_size))


def _died(procs, rank: int, world_size: int) -> str:
    code = procs[rank].exitcode
    what = f"died with signal {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    return f"rank {rank} of {world_size} {what} before returning a result"


def _raise_hung(procs, results: dict, world_size: int, timeout_s: float, stacks: list[str]) -> None:
    missing = [r for r in range(world_size) if r not in results]
    where = {}
    asked = []
    for r in missing:  # ask each missing rank for its Python stack (faulthandler, works inside C calls)
        if procs[r].is_alive():
            try:
                os.kill(procs[r].pid, signal.SIGUSR1)
                asked.append(r)
            except ProcessLookupError:
                pass
    _wait_for_stacks([stacks[r] for r in asked])
    for r in missing:
        where[r] = _where(stacks[r])
    # A rank waiting inside a collective is a victim; blame the first one that is not. When every rank waits in
    # one, the rank waiting at a different line than all the others is the one that skipped or added a collective.
    culprit = next((r for r in missing if where[r] and not where[r][1]), None)
    if culprit is None:
        culprit = _odd_one_out(missing, where)
    at = f", at {where[culprit][0]}" if where[culprit] else ""
    raise LaunchError(
        f"rank {culprit} of {world_size} hung: no result after {timeout_s:g} s{at} (ranks without a result: {missing})",
        "\n".join(f"rank {r}: {where[r][0] if where[r] else '?'}" for r in missing),
    )


STARTUP_TIMEOUT_S = 300.0
"""The least time the ranks get to come up (start, connect to the store, init the group), whatever fn's timeout: 3 ranks
took 7-10 s at load average 20 and a fresh interpreter importing torch over 60 s at load 30."""


def startup_seconds(timeout_s: float) -> float:
    return max(timeout_s, STARTUP_TIMEOUT_S)


COLLECTIVE_TIMEOUT_MARGIN_S = 30.0
"""The ranks' collectives time out this long after the launcher's deadline for fn: the launcher must name a hung rank
(from every rank's stack) before the collective layer gives up on its own, or each waiting rank raises a timeout and
the rank that caused it is lost among its victims. It covers STACK_WAIT_S with room to spare."""
STACK_WAIT_S = 10.0
"""How long a hung rank may take to write its stack after SIGUSR1. On an idle machine it takes milliseconds; on a loaded
one the rank must first be scheduled. Waiting for the dump itself (not a fixed sleep) matters: blaming is decided
from the stacks, and a missing one turns the culprit into a guess."""


def _wait_for_stacks(paths: list[str]) -> None:
    """Until every stack file holds a dump that has stopped growing (faulthandler writes it in several writes), or
    STACK_WAIT_S has passed (a rank stuck in uninterruptible C code never writes one: its stack shows as '?')."""
    end = time.monotonic() + STACK_WAIT_S
    sizes: dict[str, int] = {}
    while paths and time.monotonic() < end:
        time.sleep(0.02)
        now = {path: _size(path) for path in paths}
        done = [path for path in paths if now[path] > _header_size(path) and now[path] == sizes.get(path)]
        paths = [path for path in paths if path not in done]
        sizes = now


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _header_size(path: str) -> int:
    """The 'main <thread id>' line each rank writes before it runs anything."""
    try:
        with open(path, "rb") as f:
            return len(f.readline())
    except OSError:
        return 0


def _odd_one_out(missing: list[int], where: dict) -> int:
    """The only rank whose stack stops at a line no other rank is at, when all the others share one line; else the
    first missing rank (two ranks, or no single odd one: the stacks cannot tell)."""
    lines = {r: where[r][0] for r in missing if where[r]}
    for r, line in lines.items():
        others = {v for k, v in lines.items() if k != r}
        if len(others) == 1 and line not in others and len(lines) == len(missing) >= 3:
            return r
    return missing[0]


_FRAME = re.compile(r'File "(.+)", line (\d+) in (\S+)')


def _where(stack_path: str) -> tuple[str, bool] | None:
    """(innermost frame outside torch and the standard library, whether torch.distributed is below it)."""
    try:
        text = Path(stack_path).read_text()
    except OSError:
        return None
    header, _, dump = text.partition("\n")
    main = int(header.split()[-1], 16) if header.startswith("main ") else None
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump)
    block = next(
        (b for b in blocks if main is not None and re.match(rf"(?:Current thread|Thread) 0x0*{main:x}\b", b.strip())),
        blocks[0] if blocks else "",
    )
    frames = _FRAME.findall(block)  # innermost first
    if not frames:
        return None
    # real paths: a virtual environment reached through a symlink prints torch's frames under the link's path
    in_dist = any("distributed" in f for f, _, _ in frames[:4] if os.path.realpath(f).startswith(_TORCH_DIR))
    stdlib = os.path.realpath(os.path.dirname(os.__file__))
    for f, line, func in frames:
        real = os.path.realpath(f)
        if not real.startswith((_TORCH_DIR, stdlib)) and "distlab/runtime/launcher.py" not in f:
            return f"{os.path.basename(f)}:{line} in {func}", in_dist
    f, line, func = frames[0]
    return f"{os.path.basename(f)}:{line} in {func}", in_dist


def _consequential(error: str) -> bool:
    """An error raised by the collective layer because a peer went away ("connection reset by peer")."""
    return "c10d" in error or "gloo" in error.lower() or "nccl" in error.lower()


ROOT_CAUSE_WAIT_S = 10.0
"""How long, at most, collective-layer errors wait for the news that explains them (a peer's own error, or its exit
in the process table). The news is certain to come (the peer is gone or failing), only its delivery is slow on a
loaded machine: a rank's exit reaches the launcher through the fork server, and a rank's error through its queue's
feeder thread; both need a core. Waiting ends as soon as the news arrives, so the bound costs nothing when healthy."""
OWN_ERROR_WAIT_S = 0.3
"""With an error of the rank's own (not the collective layer's) in hand, the short wait for a silent death that
came before it."""


def _raise_root_cause(procs, results: dict, results_q, world_size: int, errors: list) -> None:
    """When one rank fails or dies, its peers fail too, inside the collective that waited for it. Blame,
    in this order: a rank that exited without a word (os._exit, a signal, the OOM killer), with its exit
    code or signal; else the first rank whose error did not come from the collective layer; else the first
    error. The message names that rank first; what another rank did after it may follow as "(then rank k: ...)".

    A peer's error usually arrives before the dead or failing rank's own news, so collective-layer errors wait
    for it (ROOT_CAUSE_WAIT_S at most). A rank is silent only if it has exited AND the queue, drained after its
    exit was seen, holds nothing from it: a rank flushes its queue before it exits, so the drain cannot miss it."""
    start = time.monotonic()
    while True:
        _drain(results_q, results, errors)
        if any(proc.exitcode is not None for r, proc in enumerate(procs) if not _spoke(r, results, errors)):
            _drain(results_q, results, errors)  # what an exited rank sent before it exited is in the pipe now
            silent = [r for r, proc in enumerate(procs) if proc.exitcode is not None and not _spoke(r, results, errors)]
            if silent:
                first = errors[0]
                raise LaunchError(f"{_died(procs, silent[0], world_size)} (then rank {first[0]}: {first[1]})", first[2])
        waited = time.monotonic() - start
        own = any(not _consequential(e[1]) for e in errors)
        everyone_spoke = all(_spoke(r, results, errors) for r in range(len(procs)))
        if (own and waited > OWN_ERROR_WAIT_S) or everyone_spoke or waited > ROOT_CAUSE_WAIT_S:
            break
    rank, payload, details = next((e for e in errors if not _consequential(e[1])), errors[0])
    raise LaunchError(f"rank {rank} of {world_size} failed: {payload}", details)


def _spoke(rank: int, results: dict, errors: list) -> bool:
    return rank in results or any(e[0] == rank for e in errors)


def _drain(results_q, results: dict, errors: list) -> None:
    """Every message already sent (waiting at most 50 ms for the first)."""
    timeout = 0.05
    while True:
        try:
            status, r, p, d = results_q.get(timeout=timeout)
        except queue.Empty:
            return
        if status == "error":
            errors.append((r, p, d))
        else:
            results[r] = pickle.loads(p)
        timeout = 0.01


def _stop(procs) -> None:
    for p in procs:
        if p.pid is not None and p.is_alive():
            p.terminate()
    for p in procs:
        if p.pid is None:
            continue
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)


def _die_with_parent(launcher_pid: int) -> None:
    """Three guards, because a rank that outlives its launcher holds a port, cores and memory forever:
    PR_SET_PDEATHSIG (SIGKILL when the process that forked us exits), the fork server's 'alive' pipe
    closed (a rank holding it would keep the server, its parent, alive after the launcher died), and a
    watchdog thread that waits on a pidfd of the launcher itself."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    try:
        from multiprocessing import forkserver

        server = forkserver._forkserver  # private, hence the guard: only the pipe's fd is touched
        if server._forkserver_alive_fd is not None:
            os.close(server._forkserver_alive_fd)
            server._forkserver_alive_fd = None
    except (AttributeError, OSError):
        pass
    try:
        pidfd = os.pidfd_open(launcher_pid)
    except ProcessLookupError:  # the launcher died before we got here: nobody would ever stop us
        os._exit(1)
    except (AttributeError, OSError):  # no pidfd (old kernel, not Linux): PDEATHSIG alone
        return
    import select
    import threading

    def watch():
        select.select([pidfd], [], [])
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="distlab-launcher-watchdog", daemon=True).start()


def _worker(
    payload, rank, world_size, device, backend, port, timeout_s, env, launcher_pid, stack_path, results_q
) -> None:
    _die_with_parent(launcher_pid)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    import faulthandler
    import threading

    stack_file = open(stack_path, "w")  # lives as long as the process
    stack_file.write(f"main {threading.main_thread().ident:x}\n")
    stack_file.flush()
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)
    os.environ.clear()
    os.environ.update(env)
    os.environ.update(
        MASTER_ADDR=_HOST,
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
        DISTLAB_SPAWNED="1",
    )
    torch.set_num_threads(1)  # every rank shares the machine's cores
    try:
        fn, args = pickle.loads(payload)  # imports fn's module now, with the launcher's environment
        if device == "cuda":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        store = dist.TCPStore(_HOST, port, is_master=False, timeout=timedelta(seconds=startup_seconds(timeout_s)))
        dist.init_process_group(
            backend,
            store=store,
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=startup_seconds(timeout_s) + COLLECTIVE_TIMEOUT_MARGIN_S),
        )
        _wait_until_every_rank_is_up(store, rank, world_size, timeout_s)  # the launcher's deadline for fn starts here
        result = fn(rank, world_size, *args)
        results_q.put(("ok", rank, pickle.dumps(result), ""))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as one line, before peers notice
        results_q.put(("error", rank, _one_line(exc), traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _wait_until_every_rank_is_up(store, rank: int, world_size: int, timeout_s: float) -> None:
    """A rank's init_process_group can return while a peer is still connecting to it (gloo's connectFullMesh): a rank
    that then ran a short fn and exited would break that peer's init ("Connection closed by peer"), seen on a loaded
    machine. So no rank runs fn until every rank's init has returned. It goes through the rendezvous store, not the
    process group, so it adds no collective to what an experiment counts."""
    store.set(f"distlab/up/{rank}", "1")
    store.wait([f"distlab/up/{r}" for r in range(world_size)], timedelta(seconds=startup_seconds(timeout_s)))


def _one_line(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    last = tb[-1] if tb else None
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    where = f" ({os.path.basename(last.filename)}:{last.lineno})" if last else ""
    return f"{type(exc).__name__}: {first}{where}"


def _run_under_torchrun(fn, world_size, args, device, backend, timeout_s) -> list:
    """Run fn on torchrun's group. The group is created once and kept until the process exits:
    destroying and re-creating it on torchrun's store would reuse the first group's rendezvous keys,
    and a rank could connect to its peer's stale address and hang."""
    if not dist.is_initialized():
        if device == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
        atexit.register(_destroy_group)
    world = dist.get_world_size()
    if world != world_size:
        raise LaunchError(
            f"launch asked for {world_size} ranks but torchrun started {world}: "
            f"run with --nproc-per-node {world_size} (or set the world size to match)"
        )
    try:
        outcome = ("ok", fn(dist.get_rank(), world, *args), "")
    except Exception as exc:  # noqa: BLE001 - every rank learns which rank failed
        outcome = ("error", _one_line(exc), traceback.format_exc())
    gathered = [None] * world
    dist.all_gather_object(gathered, outcome)
    for rank, (status, value, details) in enumerate(gathered):
        if status == "error":
            raise LaunchError(f"rank {rank} of {world} failed: {value}", details)
    return [value for _, value, _ in gathered]


def _destroy_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
