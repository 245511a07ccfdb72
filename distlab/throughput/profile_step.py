"""profile-step: torch.profiler on a real data-parallel training step, broken down the way you debug one.

Two DDP ranks (gloo on CPU, NCCL on CUDA) train the small GPT; each step is wrapped in named ranges
(`record_function`): data, forward, backward, optimizer. DDP's gradient all-reduces run on the backend's
own threads (gloo) or stream (NCCL) *during* backward, so communication is measured from the profiler's
collective events (`gloo:all_reduce`, `nccl:all_reduce`), and split into

    hidden  = communication that ran while backward was still computing,
    exposed = what was left after the last backward op finished (the step waits for it).

How to read a profile, in order: (1) do the named phases add up to the step? If not, time is going
somewhere unnamed (Python, the allocator, a sync). (2) Is `data` more than a few percent? The input
pipeline is starving the model (see dataloader-starvation). (3) Is exposed communication large? Overlap
is failing (bucket size, order) or the network is the bottleneck. (4) Only then the top operators.
"""

from __future__ import annotations

import os
import time

import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils.data import DataLoader

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.models.gpt import GPT, GPTConfig, param_count
from distlab.runtime.launcher import launch
from distlab.throughput.dataloader_starvation import SlowDataset

CFG = GPTConfig(vocab=512, seq=64, layers=2, hidden=128, heads=4)
BATCH, SAMPLE_S = 4, 0.002  # a small slow transform: data loading shows up in the profile
BUCKET_MB = 1  # small buckets: the gradients go out in more than one all-reduce, overlapping backward
STEPS, WARMUP = 4, 2


def quiet_profiler() -> None:
    """Silence libkineto's "USDT ... profiler_start / profiler_stop" lines, one pair per profile() block on
    stderr (they clutter the build log). libkineto reads KINETO_LOG_LEVEL once, when the process starts
    its first profiler, so call this before profile(). USDT is kineto's highest level, so 6 also hides its
    (C++) errors; Python-side profiler warnings are unaffected, and a level the user set is kept."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")


PHASES = ("data", "forward", "backward", "optimizer")


class TokenDataset(SlowDataset):
    """SlowDataset that yields (tokens, next-token targets) for the GPT."""

    def __getitem__(self, index: int):
        super().__getitem__(index)  # the slow transform
        g = torch.Generator().manual_seed(index)
        seq = torch.randint(0, CFG.vocab, (CFG.seq + 1,), generator=g)
        return seq[:-1], seq[1:]


def _is_comm(name: str) -> bool:
    return name.split(":")[0] in ("gloo", "nccl") and "all_reduce" in name


def profile_rank(rank: int, world: int, device: str) -> dict:
    """Rank function: STEPS DDP steps after WARMUP, profiled on rank 0; returns rank 0's breakdown."""
    dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    torch.manual_seed(0)
    model = DDP(GPT(CFG).to(dev), bucket_cap_mb=BUCKET_MB, device_ids=[dev.index] if device == "cuda" else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ds = TokenDataset((STEPS + WARMUP) * BATCH * world, SAMPLE_S, BATCH)
    it = iter(DataLoader(torch.utils.data.Subset(ds, range(rank, len(ds), world)), batch_size=BATCH))

    def step():
        with record_function("data"):
            x, y = (t.to(dev) for t in next(it))
            sync()
        with record_function("forward"):
            loss = model(x, y)
            sync()
        with record_function("backward"):
            loss.backward()
            sync()
        with record_function("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
            sync()

    for _ in range(WARMUP):
        step()
    if rank != 0:  # only rank 0 is profiled (the profiler's start and stop cost seconds); the others train
        for _ in range(STEPS):
            step()
        return {}
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    walls = []
    quiet_profiler()
    with profile(activities=activities, record_shapes=True) as prof:
        for _ in range(STEPS):
            t0 = time.perf_counter()
            step()
            walls.append(time.perf_counter() - t0)
    events = prof.events()
    phase = {p: 0.0 for p in PHASES}
    backward_ranges, comm, comm_numel = [], [], 0
    last_compute = []
    for e in events:
        if e.name in PHASES:
            phase[e.name] += e.time_range.elapsed_us() * 1e-6
            if e.name == "backward":
                backward_ranges.append((e.time_range.start, e.time_range.end))
        elif _is_comm(e.name):
            comm.append((e.time_range.start, e.time_range.end))
            comm_numel += sum(int(torch.Size(s).numel()) for s in e.input_shapes if s)
    for start, end in backward_ranges:
        ops = [
            e.time_range.end
            for e in events
            if e.name.startswith("autograd::engine::evaluate_function") and start <= e.time_range.start <= end
        ]
        last_compute.append(max(ops, default=start))
    comm_total = sum(b - a for a, b in comm) * 1e-6
    exposed = 0.0
    for (start, end), last in zip(backward_ranges, last_compute):
        ends = [b for a, b in comm if start <= a <= end]
        exposed += max(0.0, max(ends, default=last) - last) * 1e-6
    per_step_numel = comm_numel // STEPS if comm_numel % STEPS == 0 else comm_numel / STEPS
    out = {
        "phase_s": {p: v / STEPS for p, v in phase.items()},
        "step_s": sum(walls) / STEPS,
        "comm_s": comm_total / STEPS,
        "exposed_comm_s": exposed / STEPS,
        "comm_numel": per_step_numel,
        "comm_calls": len(comm) / STEPS,
    }
    averages = prof.key_averages()
    key = "self_cpu_time_total"
    if device == "cuda":  # torch >= 2.4 names it self_device_time_total; older versions self_cuda_time_total
        key = next(k for k in ("self_device_time_total", "self_cuda_time_total") if hasattr(averages[0], k))
    top = sorted(averages, key=lambda k: getattr(k, key), reverse=True)
    out["top"] = [(k.key, getattr(k, key) * 1e-6 / STEPS, k.count // STEPS) for k in top if k.key not in PHASES][:8]
    return out


@experiment("profile-step", "torch.profiler on a real DDP training step: data, forward, backward, optimizer, comm")
def profile_step(device: str) -> Result:
    r = Result("profile-step")
    world = 2 if device == "cpu" else max(1, min(2, torch.cuda.device_count()))
    res = launch(profile_rank, world, device, device=device, timeout_s=300)
    p0 = res[0]
    n = param_count(CFG)
    step = p0["step_s"]
    r.add("ranks", world, "ranks", "DDP ranks")
    r.add("params", n, "params", "model parameters")
    r.add("step_s", step, "s", "step wall time (rank 0, under the profiler)")
    rows = []
    for ph in PHASES:
        v = p0["phase_s"][ph]
        r.add(f"{ph}_s", v, "s", f"{ph} per step")
        r.add(f"{ph}_share", v / step, "fraction", f"{ph} share of the step")
        rows.append([ph, f"{1e3 * v:.2f}", f"{100 * v / step:.0f} %"])
    named = sum(p0["phase_s"].values())
    rows.append(["**named phases, total**", f"{1e3 * named:.2f}", f"{100 * named / step:.0f} %"])
    rows.append(
        [
            "communication (on gloo/NCCL threads, inside backward)",
            f"{1e3 * p0['comm_s']:.2f}",
            f"{100 * p0['comm_s'] / step:.0f} %",
        ]
    )
    rows.append(
        [
            "of which exposed (after backward's last op)",
            f"{1e3 * p0['exposed_comm_s']:.2f}",
            f"{100 * p0['exposed_comm_s'] / step:.0f} %",
        ]
    )
    r.table(
        "phases",
        ["phase", "ms per step", "share of step"],
        rows,
        caption=f"rank 0 of {world}, mean of {STEPS} profiled steps after {WARMUP} warm-up steps",
    )
    r.add("comm_s", p0["comm_s"], "s", "all-reduce time per step (overlaps backward)")
    r.add("exposed_comm_s", p0["exposed_comm_s"], "s", "communication after backward's last op")
    r.add(
        "hidden_comm_share",
        1 - p0["exposed_comm_s"] / p0["comm_s"] if p0["comm_s"] else 0.0,
        "fraction",
        "share of communication hidden behind backward",
    )
    r.add("comm_calls", p0["comm_calls"], "", "all-reduce calls (DDP buckets) per step")
    floor = r.add("data_floor_s", BATCH * SAMPLE_S, "s", "the transform's sleep per batch")
    r.claim("the transform's floor shown = 4 samples x 2 ms of sleep, by hand", floor, 0.008, unit="s")
    r.table(
        "top",
        ["operator", "self time per step (ms)", "calls per step"],
        [[name, f"{1e3 * t:.3f}", c] for name, t, c in p0["top"]],
        caption="Top operators by self time (rank 0): read these last, after the phases",
    )
    r.claim(
        "the named phases account for the step",
        named / step,
        1.0,
        rel_tol=0.05,
        unit="fraction",
        formula="data + forward + backward + optimizer vs wall time of the step",
        kind="timing",
    )
    r.claim(
        "data phase >= the transform's cost",
        p0["phase_s"]["data"],
        BATCH * SAMPLE_S,
        relation=">=",
        unit="s",
        formula=f"{BATCH} samples x their sleep",
        kind="timing",
    )
    if world > 1:
        r.claim(
            "DDP all-reduces every gradient element once per step",
            p0["comm_numel"],
            n,
            unit="elements",
            formula="sum of all-reduce input sizes in the profile = parameter count",
        )
    return r
