"""Practice 5: a 32-GPU job at 28 % MFU, triaged (experiment practice-mfu-budget).

The answer an on-call engineer gives: re-check the arithmetic, compare the number with what the plan should reach (the
planner's MFU with its calibration band), then walk the usual suspects in the order that is cheapest to rule out,
each with the number that would confirm or exclude it, computed by the library where it can be. No factor is fitted
to make the budget land on 28 %: what the known losses do not explain is reported as the residual the GPU-side
checks must find.

The planner is used through `_planner_view` only (its API is being reworked).
"""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.facts import value
from distlab.core.results import Quantity, Result
from distlab.planner.planner_validation import claim_band
from distlab.practice import diagnose_28_mfu_checks

MFU_OBSERVED = 0.28  # the question's premise: what the team's dashboard reports
MODEL, GPU, NODES = "13B", "H100-SXM", 4
TEAM_PLAN = dict(tp=4, pp=2, dp=4, zero=1, micro_batch=2, microbatches=32, recompute="full")  # 256 sequences
# The scenario around the plan (inputs, each a plausible misconfiguration):
LOADER_WORKERS, LOADER_SECONDS = 1, 8.0  # one DataLoader worker; CPU seconds to tokenize and pack one step's batch
SAVE_EVERY_S, SAVE_BYTES_PER_S = 1800.0, 2e9  # a synchronous save every 30 min to storage writing 2 GB/s
RESTART_S = 600.0  # rescheduling, loading the checkpoint, warming up
THROTTLED_CLOCK = 0.9  # what-if: one GPU held at 90 % of its clock (thermal or power)
BUSBW_ALARM = 0.8  # an nccl-tests busbw below this share of the link model is a finding


def _planner_view(r: Result, m, c, t):
    """The planner's step for the team's plan and its best plan (the one place this module calls the planner), their
    causes by hand (cost_checks)."""
    from types import SimpleNamespace

    from distlab.planner.config import Plan, usable_bytes
    from distlab.planner.cost import memory_per_gpu, step
    from distlab.planner.cost_checks import check_step_causes
    from distlab.planner.search import search
    from distlab.planner.worked_plan_7b import ddp_bucket_bytes_of_torch

    e = step(m, c, t, Plan(**TEAM_PLAN))
    ranked = search(m, c, t)
    timed = [(SimpleNamespace(plan=Plan(**TEAM_PLAN), time=e), m, c, t, MODEL)]
    check_step_causes(r, timed + [(x, m, c, t, MODEL) for x in ranked[:3]], ddp_bucket_bytes_of_torch())
    team = {
        "mfu": e.mfu,
        "step_seconds": e.seconds,
        "parts": e.time_by_component(),
        "memory_bytes": memory_per_gpu(m, c, t, Plan(**TEAM_PLAN)).device_bytes,
        "usable_bytes": usable_bytes(c.gpu),
    }
    best = ranked[0]
    team["best_memory_bytes"] = best.memory_bytes
    return team, best.time.mfu, best.plan.label(), Plan(**TEAM_PLAN).label()


@experiment(
    "practice-mfu-budget",
    "practice: a 32-GPU job at 28 % MFU triaged: the arithmetic, the plan's expected MFU and band, then profile, "
    "clocks, nccl-tests, transports, affinity, launch-bound steps, input, stragglers and checkpoints, each with the "
    "number that would confirm it",
    kind="computed",
)
def practice_mfu_budget(device: str) -> Result:
    from distlab.planner.calibration import mfu_band
    from distlab.planner.config import Training, cluster, model

    r = Result("practice-mfu-budget", kind="computed")
    m = model(MODEL)
    c = cluster(GPU, nodes=NODES)
    # the team runs Megatron-Core with --tp-comm-overlap (opt-in there; the planner's default is off since issue 25)
    t = Training(global_batch_tokens=256 * m.seq, seq=m.seq, tp_overlap=True)
    team, best_mfu, best_label, team_label = _planner_view(r, m, c, t)
    r.data["team_plan"], r.data["best_plan"] = team_label, best_label
    _arithmetic(r, m, c)
    low, high = mfu_band(team["mfu"])
    r.add("plan_mfu_model", team["mfu"], "fraction", "the planner's MFU for the team's plan")
    r.add("plan_mfu_low", low, "fraction", "what published runs predicted at that MFU reached: low")
    r.add("plan_mfu_high", high, "fraction", "... high")
    r.add("observed", MFU_OBSERVED, "fraction", "reported MFU")
    r.claim(
        "28 % is below what the team's plan should reach (the planner's band): look outside the plan too",
        MFU_OBSERVED,
        low,
        relation="<=",
        unit="fraction",
        formula="mfu_band(planner MFU): the planner's error range on published runs",
    )
    best_low, best_high = mfu_band(best_mfu)
    r.add("best_mfu_model", best_mfu, "fraction", "the planner's best plan")
    r.add("best_mfu_low", best_low, "fraction", "its band: low")
    r.add("best_mfu_high", best_high, "fraction", "its band: high")
    r.claim(
        "the best plan's predicted MFU is above the team plan's whole band",
        best_mfu,
        high,
        relation=">=",
        unit="fraction",
    )
    parts = _profile(r, team)
    rows = [_clocks(r, c), _nccl_tests(r), _transports(r), _affinity(r), _launch_bound(r, m, c, t)]
    # The step the plan really takes on H100s: the planner's, scaled by its band (what published runs reached).
    steps = (team["step_seconds"] * team["mfu"] / high, team["step_seconds"] * team["mfu"] / low)
    known = _environment(r, m, c, steps)
    rows += known["rows"]
    _residual(r, low, high, known["factors"], r.quantities["mfu_full"].value)
    rows += [_padding(r, m), _dtype(r, c), _allocator(r, team)]
    _whiteboard(r, m)
    r.table(
        "triage",
        ["step", "look at", "confirms it", "this job (computed)"],
        [["1. the profile trace", "one profiled step (chapter 10)", parts, "see the table above"]] + rows,
        caption=f"Triage of {m.name} on {c.nodes} x {c.gpus_per_node} {c.gpu.name}, team plan {team_label}",
    )
    r.table(
        "scenario",
        ["input", "value"],
        [
            ["model, cluster", f"{m.name}, {c.nodes} nodes x {c.gpus_per_node} {c.gpu.name}"],
            ["global batch", f"{t.sequences} sequences of {t.seq} tokens"],
            ["the team's plan", team_label],
            ["input pipeline", f"{LOADER_WORKERS} DataLoader worker, {LOADER_SECONDS:g} s of CPU work per step"],
            [
                "checkpoints",
                f"synchronous, every {SAVE_EVERY_S / 60:g} min to storage at {SAVE_BYTES_PER_S / 1e9:g} GB/s",
            ],
            ["failures", f"Llama 3's rate per GPU, restarts of {RESTART_S / 60:g} min"],
        ],
        caption="The scenario: what the team runs (inputs, not results)",
    )
    claim_band(r)  # the MFU bands this page quotes
    diagnose_28_mfu_checks.claims(r, _check_inputs(c, team["usable_bytes"]))
    return r


def _check_inputs(c, usable: float) -> dict:
    """The scenario and the other chapters' models at this job, for the by-hand checks."""
    from distlab.interconnect.nccl_model import best, ib_cluster, nvlink_node
    from distlab.interconnect.nic_affinity import path_bytes_per_s
    from distlab.interconnect.topology import ASSUMED_MFU
    from distlab.throughput.launch_overhead import step_ops

    topos = {"node": nvlink_node(8), "cluster": ib_cluster(NODES)}
    return {
        "observed": MFU_OBSERVED,
        "team_plan": TEAM_PLAN,
        "loader_workers": LOADER_WORKERS,
        "loader_seconds": LOADER_SECONDS,
        "save_every_s": SAVE_EVERY_S,
        "save_bytes_per_s": SAVE_BYTES_PER_S,
        "restart_s": RESTART_S,
        "throttled_clock": THROTTLED_CLOCK,
        "busbw_alarm": BUSBW_ALARM,
        "kernels_per_layer": step_ops(3) - step_ops(2),
        "launch_s": value("launch_overheads.cpu-launch-typical.cpu_launch_us_high") * 1e-6,
        "assumed_mfu": ASSUMED_MFU,
        "allreduce_1gib": {k: (best("all-reduce", 2**30, t)[2], t.ranks) for k, t in topos.items()},
        "nic_sys": path_bytes_per_s("SYS"),
        "nic_pix": path_bytes_per_s("PIX"),
        "usable": usable,
    }


def _arithmetic(r: Result, m, c) -> None:
    """Step 0: recompute the MFU. The dashboard's 28 % used 6N per token (a common convention); the throughput that
    implies, put through the calculator's 6N + 12Lhs at the dense peak, and the two classic slips beside it."""
    from distlab.gpu.flops import hardware_flops_per_token, mfu_report

    n = m.params()
    peak = c.gpu.peak_flops("bf16")
    tokens_per_s = MFU_OBSERVED * c.gpus * peak / (6 * n)  # what the dashboard measured
    full = mfu_report(
        params=n,
        tokens_per_second=tokens_per_s,
        gpus=c.gpus,
        gpu_name=c.gpu.name,
        layers=m.layers,
        hidden=m.hidden,
        seq=m.seq,
    )
    sparse = tokens_per_s * full["flops_per_token"] / (c.gpus * c.gpu.bf16_sparse_flops)
    hfu = tokens_per_s * hardware_flops_per_token(n, m.layers, m.hidden, m.seq, "full") / (c.gpus * peak)
    r.add("tokens_per_s", tokens_per_s, "tokens/s", "the team's throughput (all GPUs)")
    r.add("mfu_6n", MFU_OBSERVED, "fraction", "MFU with 6N per token, dense peak (the dashboard)")
    r.add("mfu_full", full["mfu"], "fraction", "MFU with 6N + 12Lhs, dense peak (distlab mfu)")
    r.add("mfu_sparse_peak", sparse, "fraction", "the same against the with-sparsity peak (a slip)")
    r.add("hfu_recompute", hfu, "fraction", "hardware FLOPs utilisation with full recompute (8N + 16Lhs)")
    r.claim(
        "MFU with attention / with 6N = 1 + 12Lhs / 6N",
        full["mfu"] / MFU_OBSERVED,
        1 + 12 * m.layers * m.hidden * m.seq / (6 * n),
        rel_tol=1e-9,
        formula="PaLM's Appendix B count",
    )
    r.claim(
        "against the datasheet's with-sparsity peak the same throughput reads half the MFU",
        sparse / full["mfu"],
        value(f"gpus.{c.gpu.name}.bf16_dense_tflops") / value(f"gpus.{c.gpu.name}.bf16_sparse_tflops"),
        rel_tol=1e-9,
    )
    r.table(
        "arithmetic",
        ["how the MFU is computed", "MFU"],
        [
            ["6N per token, dense bf16 peak (the dashboard)", f"{100 * MFU_OBSERVED:.1f} %"],
            ["6N + 12Lhs per token, dense peak (`distlab mfu`)", f"{100 * full['mfu']:.1f} %"],
            ["6N + 12Lhs against the with-sparsity peak (wrong peak)", f"{100 * sparse:.1f} %"],
            ["hardware FLOPs with full recompute (HFU, not MFU)", f"{100 * hfu:.1f} %"],
        ],
        caption=f"The same throughput, {tokens_per_s:,.0f} tokens/s on {c.gpus} GPUs, four ways",
    )


def _profile(r: Result, team: dict) -> str:
    """Step 1: what one profiled step should show if the plan is all there is: the planner's time breakdown."""
    total = team["step_seconds"]
    shares = {
        "bubble": sum(v for k, v in team["parts"].items() if "bubble" in k),
        "tensor-parallel all-reduces": sum(v for k, v in team["parts"].items() if "tensor-parallel" in k),
        "recompute": sum(v for k, v in team["parts"].items() if "recompute" in k),
        "data-parallel traffic (exposed)": sum(v for k, v in team["parts"].items() if "data-parallel" in k),
    }
    rows = []
    for name, seconds in shares.items():
        key = name.split()[0].replace("-", "_")
        r.add(f"profile_{key}_share", seconds / total, "fraction", f"expected share of the step: {name}")
        rows.append([name, Quantity(seconds, "s"), f"{100 * seconds / total:.1f} %"])
    r.add("plan_step_s", total, "s", "the planner's step for the team's plan")
    r.table(
        "profile",
        ["what a profiled step should show", "seconds per step", "share of the step"],
        rows,
        caption="The planner's breakdown of the team's step: each line is a span to find in the trace",
    )
    r.claim(
        "the plan's named costs are part of its step",
        sum(shares.values()),
        total,
        relation="<=",
        unit="s",
    )
    return "a span much longer than its line above; GPU idle between kernels (launch-bound, data, syncs)"


def _clocks(r: Result, c) -> list:
    """Step 2: clocks, throttling, errors. One synchronous GPU at a lower clock sets every step."""
    from distlab.throughput.stragglers import expected_step_jitter

    slow = 1 / THROTTLED_CLOCK  # a compute-bound step on one GPU at x of its clock takes 1/x
    r.add("throttled_clock", THROTTLED_CLOCK, "fraction", "what-if: one GPU's clock")
    r.add("throttled_mfu_factor", 1 / slow, "fraction", "the whole job's MFU factor")
    r.claim(
        "a throttled GPU costs every GPU: the job's factor = the slow GPU's clock ratio",
        1 / slow,
        THROTTLED_CLOCK,
        rel_tol=1e-12,
        formula="the step ends when its slowest rank does",
    )
    r.add("jitter_32_factor", 1 / expected_step_jitter(c.gpus), "fraction", "2 % per-GPU jitter over 32 GPUs")
    return [
        "2. clocks, throttling, errors",
        "`nvidia-smi -q -d PERFORMANCE` (clock event reasons), DCGM SM clock and XID counters, `dmesg` Xid lines",
        "any active reason (thermal, power, HW slowdown) or an Xid / ECC error on any GPU",
        f"one GPU at {100 * THROTTLED_CLOCK:.0f} % clock makes all 32 run at {100 * THROTTLED_CLOCK:.0f} %",
    ]


def _nccl_tests(r: Result) -> list:
    """Step 3: nccl-tests against the link model (NCCL's own tuning model, chapter 9)."""
    from distlab.interconnect.nccl_model import best, ib_cluster, nvlink_node

    size = 2**30
    rows = []
    for key, topo in (("node", nvlink_node(8)), ("cluster", ib_cluster(NODES))):
        a, p, t = best("all-reduce", size, topo)
        busbw = size / t * 2 * (topo.ranks - 1) / topo.ranks
        r.add(f"busbw_{key}", busbw, "B/s", f"model: {topo.label}, 1 GiB all-reduce busbw")
        r.add(f"busbw_{key}_alarm", BUSBW_ALARM * busbw, "B/s", f"{BUSBW_ALARM:.0%} of it: below is a finding")
        rows.append(f"{topo.label}: {busbw / 1e9:.0f} GB/s")
    return [
        "3. nccl-tests bus bandwidth",
        "`all_reduce_perf -b 8 -e 8G -f 2` on one node, then on all nodes",
        f"busbw at 1 GiB below {100 * BUSBW_ALARM:.0f} % of the model",
        "; ".join(rows),
    ]


def _transports(r: Result) -> list:
    """Step 4: what NCCL_DEBUG=INFO says it uses."""
    good = value("nccl_debug.log-channel-net-gdr.example")
    bad = value("nccl_debug.log-channel-socket.example")
    return [
        "4. NCCL_DEBUG=INFO: transports and NICs",
        "the `Channel ... via` lines of every rank (NCCL_DEBUG_SUBSYS=INIT,NET)",
        f"`{bad.split(' INFO ')[-1]}` or no `/GDRDMA` on inter-node channels",
        f"every inter-node channel shows `{good}`",
    ]


def _affinity(r: Result) -> list:
    """Step 5: GPU-NIC affinity (chapter 9's NCCL path model)."""
    from distlab.interconnect.nic_affinity import path_bytes_per_s

    far, near = path_bytes_per_s("SYS"), path_bytes_per_s("PIX")
    r.add("far_nic_fraction", far / near, "fraction", "a NIC across the CPU link / the GPU's own (NCCL's model)")
    return [
        "5. GPU-NIC affinity",
        "`nvidia-smi topo -m`: the GPU-NIC path type of each rank's NIC",
        "a GPU using a NIC at SYS or PHB (no GPUDirect RDMA)",
        f"a NIC across the socket moves {100 * far / near:.0f} % of a near one's bytes",
    ]


def _launch_bound(r: Result, m, c, t) -> list:
    """Step 6: host syncs and CPU-launch-bound steps. Kernels per layer counted on a small GPT (launch-overhead)."""
    from distlab.gpu.flops import flops_per_token
    from distlab.interconnect.topology import ASSUMED_MFU
    from distlab.throughput.launch_bound import launch_bound_tokens
    from distlab.throughput.launch_overhead import step_ops

    per_layer = step_ops(3) - step_ops(2)
    tp, pp = TEAM_PLAN["tp"], TEAM_PLAN["pp"]
    kernels = per_layer * m.layers / pp  # one GPU's layers (TP splits widths, not kernels)
    launch = value("launch_overheads.cpu-launch-typical.cpu_launch_us_high") * 1e-6
    per_token_gpu = flops_per_token(m.params(), m.layers, m.hidden, m.seq) / (tp * pp)
    t_star = launch_bound_tokens(kernels, launch, per_token_gpu, c.gpu.peak_flops("bf16"), ASSUMED_MFU)
    tokens = TEAM_PLAN["micro_batch"] * m.seq  # what one GPU computes between launches of a micro-batch's kernels
    r.add("launch_bound_tokens", t_star, "tokens", "one GPU's step is launch-bound below this many tokens")
    r.add("micro_batch_tokens", tokens, "tokens", "tokens per micro-batch per GPU")
    r.claim(
        "this job is far from launch-bound: a micro-batch is several times the launch-bound size (5x or more)",
        tokens,
        5 * t_star,
        relation=">=",
        unit="tokens",
        formula="T* = K c peak MFU / FLOPs per token, c = HTA's 20 µs",
    )
    return [
        "6. host syncs, launch-bound steps",
        "the trace's CPU thread: gaps between kernels, `cudaStreamSynchronize` / `.item()` in the step",
        "GPU idle while the CPU launches; a sync inside the step",
        f"launch-bound below {t_star:,.0f} tokens per micro-batch; this job runs {tokens:,}",
    ]


def _environment(r: Result, m, c, steps: tuple[float, float]) -> dict:
    """Steps 7-9: input pipeline, stragglers, checkpoints: the scenario's known losses, each as a factor on MFU.
    `steps` is the plan's step on real H100s, fast and slow end (the band); the loader's factor depends on it."""
    from distlab.throughput.dataloader_starvation import predicted_step_s
    from distlab.throughput.stragglers import JITTER, expected_step_jitter
    from distlab.throughput.young_daly import daly_seconds, llama3_mtbf_seconds, lost_fraction

    fast, slow = steps
    inputs = [s / predicted_step_s(LOADER_WORKERS, LOADER_SECONDS, s) for s in (fast, slow)]
    jitter = expected_step_jitter(c.gpus)
    mtbf = llama3_mtbf_seconds() * value("interconnect.Llama3-405B-pretraining.gpus") / c.gpus
    state = 14 * m.params()
    save_s = state / SAVE_BYTES_PER_S
    ckpt = 1 - lost_fraction(SAVE_EVERY_S, save_s, mtbf, RESTART_S)
    r.add("step_fast_s", fast, "s", "the plan's step at the band's high MFU")
    r.add("step_slow_s", slow, "s", "... at its low MFU")
    r.add("factor_input_fast", inputs[0], "fraction", "factor on MFU: input, fast step (waits most)")
    r.add("factor_input_slow", inputs[1], "fraction", "factor on MFU: input, slow step")
    factors = {"stragglers": 1 / jitter, "checkpoints": ckpt}
    for k, v in factors.items():
        r.add(f"factor_{k}", v, "fraction", f"factor on MFU: {k}")
    r.add("loader_wait", 1 - inputs[0], "fraction", "share of the (fast) step waiting for data")
    r.add("jitter", JITTER, "fraction", "per-GPU step-time jitter (chapter 10)")
    r.add("save_s", save_s, "s", "one synchronous save")
    r.add("save_every_s", SAVE_EVERY_S, "s", "scenario: a save every")
    r.add("loader_seconds", LOADER_SECONDS, "s", "scenario: CPU seconds of loading per step, one worker")
    r.add("mtbf_h", mtbf / 3600, "h", "the job's MTBF at Llama 3's rate per GPU")
    r.add("ckpt_lost", 1 - ckpt, "fraction", "time lost to saves, failures and restarts")
    r.add("daly_s", daly_seconds(save_s, mtbf), "s", "Daly's interval for this save and MTBF")
    r.claim(
        "one loader worker: the fast step waits L - C for data (chapter 10's model: max(C, L/w))",
        fast / inputs[0],
        max(fast, LOADER_SECONDS / LOADER_WORKERS),
        rel_tol=1e-12,
        unit="s",
    )
    rows = [
        [
            "7. the input pipeline",
            "the data span in the trace; `num_workers`",
            "the step waits on the loader",
            f"1 worker for {LOADER_SECONDS:g} s of work against a {fast:.1f}-{slow:.1f} s step: waits up to "
            f"{100 * (1 - inputs[0]):.1f} % of the time",
        ],
        [
            "8. stragglers",
            "per-rank step times, all-gathered",
            "one rank never waits in collectives",
            f"{100 * JITTER:.0f} % jitter over {c.gpus} GPUs costs {100 * (1 - factors['stragglers']):.1f} %",
        ],
        [
            "9. checkpoints and failures",
            "wall time lost to saves, restarts, redone work",
            "saves longer than Daly's trade-off",
            f"loses {100 * (1 - ckpt):.1f} % (Daly's interval: {daly_seconds(save_s, mtbf) / 3600:.1f} h)",
        ],
    ]
    other = factors["stragglers"] * factors["checkpoints"]
    return {"factors": (inputs[0] * other, inputs[1] * other), "rows": rows}


def _residual(r: Result, low: float, high: float, factors: tuple[float, float], observed: float) -> None:
    """The plan band times the known losses, against the MFU computed right (6N + 12Lhs)."""
    expected_low, expected_high = low * factors[1], high * factors[0]
    lo, hi = sorted((expected_low, expected_high))
    r.add("expected_low", lo, "fraction", "plan band x known losses: low")
    r.add("expected_high", hi, "fraction", "... high")
    residual = observed / hi
    r.add("residual", residual, "fraction", "MFU computed right / the most the plan and known losses allow")
    r.claim(
        "the plan and the known losses explain all but a tenth of the MFU computed right",
        residual,
        0.9,
        relation=">=",
        formula="(6N + 12Lhs MFU) / (mfu_band high x input x stragglers x checkpoints)",
    )
    r.claim("... and the job is not faster than they allow", residual, 1.0, relation="<=")


def _padding(r: Result, m) -> list:
    """Padding: a loader that pads every document to the window instead of packing computes on pad tokens. What-if:
    documents as long as Llama 2's Meta preference dialogues (a sourced mean), each padded to the full sequence."""
    from distlab.scaling_laws import sft_mean_example_tokens

    mean = sft_mean_example_tokens("llama2-meta-dialogue")
    real = mean / m.seq
    r.add("pad_mean_tokens", mean, "tokens", "what-if: mean document length (Llama 2's Meta dialogues)")
    r.add("pad_real_share", real, "fraction", "real tokens in a padded batch: mean / sequence")
    r.add("pad_mfu_if_padded", r.quantities["mfu_full"].value * real, "fraction", "MFU on real tokens if so")
    r.claim(
        "padded to the window, the real tokens are mean length / sequence of the batch",
        real * m.seq,
        mean,
        rel_tol=1e-12,
        unit="tokens",
    )
    return [
        "10. padding, unpacked sequences",
        "the loader's collate function; real (non-pad) tokens per batch against batch x sequence",
        "pad tokens in the batch, or tokens/s counted with them",
        f"documents of {mean:,.0f} tokens padded to {m.seq:,}: {100 * real:.0f} % of the compute is real",
    ]


def _dtype(r: Result, c) -> list:
    """The dtype the matmuls really run in: a missing autocast runs them in tf32 (if allowed) or fp32, whose peaks
    cap the MFU against the bf16 peak far below 28 % (fp32) or at half (tf32)."""
    from distlab.hardware.gpus import data_claims

    data_claims(r, [c.gpu.name])  # the tf32 = bf16 / 2 and fp32 = lanes x 2 x clock relations of the datasheet
    bf16 = c.gpu.peak_flops("bf16")
    tf32, fp32 = c.gpu.peak_flops("tf32") / bf16, c.gpu.peak_flops("fp32") / bf16
    r.add("tf32_ceiling", tf32, "fraction", "the most a tf32 run reaches against the bf16 peak")
    r.add("fp32_ceiling", fp32, "fraction", "the most an fp32 (no tensor core) run reaches")
    r.claim("a job in plain fp32 could not show 28 %", fp32, MFU_OBSERVED, relation="<=", unit="fraction")
    r.claim("... a job in tf32 could", tf32, MFU_OBSERVED, relation=">=", unit="fraction")
    return [
        "11. the dtype the matmuls run in",
        "`torch.get_autocast_dtype('cuda')`, `torch.backends.cuda.matmul.allow_tf32`, GEMM kernel names in the trace",
        "tf32 or fp32 GEMMs (`tf32`, `sgemm` in kernel names) where bf16 was meant",
        f"tf32 caps MFU at {100 * tf32:.0f} % of the bf16 peak, fp32 at {100 * fp32:.1f} %",
    ]


def _allocator(r: Result, team: dict) -> list:
    """The caching allocator near the memory limit: a failed cudaMalloc makes it free its cached blocks and retry
    (`num_alloc_retries` in torch.cuda.memory_stats()), each time synchronising the device."""
    usable = team["usable_bytes"]
    for key, used in (("team", team["memory_bytes"]), ("best", team["best_memory_bytes"])):
        r.add(f"{key}_memory_bytes", used, "B", f"planner: memory per GPU, {key} plan")
        r.add(f"{key}_headroom", 1 - used / usable, "fraction", f"{key} plan: 1 - memory / usable")
    r.add("usable_bytes", usable, "B", "usable memory per GPU (planner)")
    r.claim(
        "the team's plan is far from the limit (a fifth or more of usable memory free): not the allocator",
        r.quantities["team_headroom"].value,
        0.2,
        relation=">=",
        unit="fraction",
    )
    r.claim(
        "dropping recomputation (the fix) leaves less headroom than the team's plan",
        r.quantities["best_headroom"].value,
        r.quantities["team_headroom"].value,
        relation="<=",
        unit="fraction",
    )
    return [
        "12. the allocator near the limit",
        "`torch.cuda.memory_stats()`: `num_alloc_retries`, `num_ooms`; reserved against allocated memory",
        "`num_alloc_retries` growing step after step (each retry frees the cache and synchronises)",
        f"the team's plan needs {team['memory_bytes'] / 1e9:.0f} of {usable / 1e9:.0f} GB usable: "
        + ("not near the limit" if team["memory_bytes"] < 0.8 * usable else "near the limit: check it"),
    ]


def _whiteboard(r: Result, m) -> None:
    """The factors a candidate multiplies on the whiteboard (the page rounds them to two figures)."""
    n = m.params()
    r.add("wb_attention_factor", 1 + 12 * m.layers * m.hidden * m.seq / (6 * n), "", "(6N + 12Lhs) / 6N")
    r.add("wb_recompute_factor", 6 / 8, "", "model / hardware FLOPs under full recomputation (6N / 8N)")
    r.add(
        "wb_hfu_over_mfu",
        r.quantities["hfu_recompute"].value / r.quantities["mfu_full"].value,
        "",
        "HFU / MFU with full recomputation",
    )
    r.claim(
        "full recomputation: hardware / model FLOPs is 4/3 (a second forward), with attention's 16/12 alike",
        r.quantities["wb_hfu_over_mfu"].value,
        8 / 6,
        rel_tol=1e-9,
        formula="(8N + 16Lhs) / (6N + 12Lhs)",
    )
