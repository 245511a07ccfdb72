"""Model-state bytes and traffic per GPU for DDP and ZeRO 1-3, a 7B model on 8 GPUs (experiment zero-memory),
from the formulas of distlab.sharding.zero."""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.formatting import format_quantity
from distlab.core.results import Quantity, Result
from distlab.hardware.gpus import data_claims
from distlab.memory.model_states import bytes_per_param
from distlab.sharding.zero import (
    STAGE_NAMES,
    STAGES,
    STATES,
    bytes_per_param_by_state,
    conventions,
    model_state_bytes_per_gpu,
    shard_elements,
    traffic_bytes_per_gpu,
)
from distlab.sharding.zero_checks import by_hand, figure_claim, hbm_bytes


# ---------------------------------------------------------------- the zero-memory experiment
@experiment("zero-memory", "model-state bytes and traffic per GPU for DDP and ZeRO 1-3, 7B on 8 GPUs", kind="computed")
def zero_memory(device: str) -> Result:
    from distlab.hardware.gpus import gpu
    from distlab.models.published import claim_checkpoint_count, claim_llama2_context
    from distlab.models.shapes import preset

    r = Result("zero-memory")
    data_claims(r, ["H100-SXM"])  # its memory and peak enter the page's numbers
    for name in ("7B", "70B"):
        claim_checkpoint_count(r, name)
    claim_llama2_context(r, preset("70B"))
    n, gpus = preset("7B").params(), GPUS
    hbm = gpu("H100-SXM").hbm_bytes
    r.add("params", n, "params", "Llama 2 7B parameters")
    r.add("params_billions", n / 1e9, "", "Llama 2 7B parameters, in billions")
    r.add("gpus", gpus, "GPUs", "data-parallel size")
    per = bytes_per_param_by_state()
    for s in STATES:
        r.add(f"{s}_bytes_per_param", per[s], "B/param", f"{s} bytes per parameter (chapter 1)")
    configs = [(z, False, False) for z in STAGES] + [
        (1, True, False),
        (2, True, False),
        (3, True, False),
        (3, True, True),
    ]
    rows = []
    for z, oo, op in configs:
        m = model_state_bytes_per_gpu(n, gpus, z, offload_optimizer=oo, offload_params=op)
        label = STAGE_NAMES[z] + (" + offload opt." if oo else "") + (" + offload params" if op else "")
        rows.append(
            [label]
            + [
                Quantity(m[k], "B")
                for k in ("params_bytes", "grads_bytes", "optimizer_bytes", "total_bytes", "host_bytes")
            ]
            + ["yes" if m["total_bytes"] < hbm else "no"]
        )
        key = f"z{z}" + ("_oo" if oo else "") + ("_op" if op else "")
        r.add(f"{key}_total_bytes", m["total_bytes"], "B", f"{label}: device bytes per GPU")
        r.add(f"{key}_host_bytes", m["host_bytes"], "B", f"{label}: host bytes per GPU")
    r.table(
        "seven_b",
        [
            "stage",
            "parameters",
            "gradients",
            "optimizer",
            "total per GPU",
            "host per GPU",
            f"states fit {format_quantity(hbm, 'B')}?",
        ],
        rows,
        caption=f"Llama 2 7B, {gpus} GPUs, mixed-precision AdamW, model states only (no activations)",
    )
    # Independent closed forms: the ZeRO paper's Figure 1 formulas with K = 12, Ψ/N rounded up (typed here on
    # purpose, not from model_states.BYTES_PER_PARAM: they are the published reference the code is checked against).
    shard = shard_elements(n, gpus)
    for z, formula, expected in (
        (0, "(2 + 2 + K)Ψ", 16 * n),
        (1, "(2 + 2)Ψ + K⌈Ψ/N⌉", 4 * n + 12 * shard),
        (2, "2Ψ + (2 + K)⌈Ψ/N⌉", 2 * n + 14 * shard),
        (3, "(2 + 2 + K)⌈Ψ/N⌉", 16 * shard),
    ):
        r.claim(
            f"7B on 8 GPUs, {STAGE_NAMES[z]}: per-GPU model states",
            model_state_bytes_per_gpu(n, gpus, z)["total_bytes"],
            expected,
            unit="B",
            formula=formula,
        )
    _zero_paper_example(r)
    r.add(
        "zero3_vs_ddp",
        model_state_bytes_per_gpu(n, gpus, 3)["total_bytes"] / model_state_bytes_per_gpu(n, gpus, 0)["total_bytes"],
        "",
        "ZeRO-3 / DDP bytes per GPU",
    )
    r.add("hbm_bytes", hbm, "B", "H100 SXM memory")
    _traffic(r, n, gpus)
    _conventions(r, gpus)
    _figure(r, n, hbm)
    _picture(r, n, gpus, hbm)
    _worked(r, n, gpus, hbm)
    by_hand(
        r,
        micro=MICRO_SEQS,
        big_gpus=BIG_GPUS,
        accum=ACCUMULATION_MICROBATCHES,
        hide_mfu=HIDE_MFU,
        large_gpus=LARGE_CLUSTER_GPUS,
    )
    return r


def _zero_paper_example(r: Result) -> None:
    """The ZeRO paper's Figure 1 case (7.5B on 64 GPUs, K = 12): its printed per-device GB for each stage against
    this chapter's formulas, to half a unit of the printed digit (zero_estimators.toml)."""
    from distlab.core.facts import entries
    from distlab.hardware.gpus import printed_half_unit

    row = entries("zero_estimators")["zero-paper-figure-1"]
    params, gpus = round(row["params_billions"] * 1e9), row["gpus"]
    printed = [row[k] for k in ("baseline_gb", "pos_gb", "pos_g_gb", "pos_g_p_gb")]
    ours = [model_state_bytes_per_gpu(params, gpus, z)["total_bytes"] / 1e9 for z in STAGES]
    r.claim("K = the ZeRO paper's K", bytes_per_param_by_state()["optimizer"], row["optimizer_bytes_per_param"])
    r.claim(
        "ZeRO paper's 7.5B on 64 GPUs: 120, 31.4, 16.6, 1.9 GB (largest gap in half printed units)",
        max(abs(o - p) / printed_half_unit(p) for o, p in zip(ours, printed, strict=True)),
        1.0,
        relation="<=",
    )


def _picture(r: Result, n: int, gpus: int, hbm: float) -> None:
    """ZeRO's shards drawn for the chapter's 7B on 8 GPUs; the drawn bars are checked against the ZeRO paper's
    closed forms (K = 12, typed here as the published reference) and the hatching against what each stage shards."""
    from distlab.sharding.zero_picture import draw_shards

    sharded = {0: set(), 1: {"optimizer"}, 2: {"optimizer", "grads"}, 3: {"optimizer", "grads", "params"}}
    labels = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}
    rows = [(labels[z], model_state_bytes_per_gpu(n, gpus, z), sharded[z]) for z in STAGES]
    fig = draw_shards(rows, hbm, gpus, "H100")
    drawn = [0.0] * len(rows)
    hatched = [set() for _ in rows]
    gaps: list[float] = []
    for patch in fig.axes[0].patches:
        kind, i, state, *shard = (patch.get_gid() or "::").split(":")
        if kind == "seg":
            gaps.append(abs(patch.get_x() * 1e9 - drawn[int(i)]))  # each segment starts where the last ended
            drawn[int(i)] += patch.get_width() * 1e9
            if shard:
                hatched[int(i)].add(state)
    shard = shard_elements(n, gpus)
    for z, expected in zip(STAGES, (16 * n, 4 * n + 12 * shard, 2 * n + 14 * shard, 16 * shard)):
        r.claim(
            f"drawing, {labels[z]}: the bar's segments add up to the per-GPU model states",
            drawn[z],
            expected,
            rel_tol=1e-9,
            unit="B",
            formula="ZeRO paper, Figure 1, K = 12",
        )
    r.claim("drawing: segments stacked end to end from 0 (largest gap)", max(gaps), 0.0, abs_tol=1.0, unit="B")
    line = next(ln for ln in fig.axes[0].get_lines())  # the GPU's memory, dashed, in GB
    r.claim(
        "drawing: memory line at MLPerf's H100 capacity",
        line.get_xdata()[0] * 1e9,
        hbm_bytes(),
        rel_tol=1e-12,
        unit="B",
    )
    r.claim(
        "drawing: hatched (sharded) states are optimizer (ZeRO-1), + gradients (ZeRO-2), + parameters (ZeRO-3)",
        sum(hatched[z] == set(["optimizer", "grads", "params"][:z]) for z in STAGES),
        len(STAGES),
        unit="stages",
    )
    r.figure(
        "shards",
        fig,
        f"What one GPU keeps of Llama 2 7B's model states on {gpus} GPUs (mixed-precision AdamW): each ZeRO stage "
        f"shards one more state, so each GPU keeps 1/{gpus} of it (hatched): first the optimizer state, then the "
        "gradients, then the parameters",
    )


def _worked(r: Result, n: int, gpus: int, hbm: float) -> None:
    """Numbers for the worked problems: 70B on 64 GPUs; 7B's traffic on NVLink vs a 400 Gb/s NIC."""
    from distlab.hardware.gpus import gpu
    from distlab.hardware.links import per_direction_bytes_per_s
    from distlab.models.shapes import preset

    big = preset("70B").params()
    r.add("70b_params", big, "params", "Llama 2 70B parameters")
    r.add("70b_gpus", BIG_GPUS, "GPUs", "70B's worked problem: data-parallel GPUs (input)")
    r.add("70b_params_billions", big / 1e9, "", "Llama 2 70B parameters, in billions")
    for z in (1, 2, 3):
        r.add(
            f"70b_z{z}_bytes",
            model_state_bytes_per_gpu(big, BIG_GPUS, z)["total_bytes"],
            "B",
            f"70B on 64 GPUs, {STAGE_NAMES[z]}: model states per GPU",
        )
    min_gpus = -(-bytes_per_param() * big // int(hbm))
    r.add("70b_z3_min_gpus", min_gpus, "GPUs", "fewest GPUs whose memory holds 70B's 16Ψ")
    for link, key in (("NVLink4-H100", "nvlink"), ("InfiniBand-NDR", "ndr")):
        bw = per_direction_bytes_per_s(link)
        r.add(f"{key}_bytes_per_s", bw, "B/s", f"{link}: bytes per second per direction")
        for z in (0, 3):
            r.add(
                f"{key}_z{z}_s",
                traffic_bytes_per_gpu(n, gpus, z)["total_bytes"] / bw,
                "s",
                f"7B, {gpus} GPUs, {STAGE_NAMES[z]}: seconds of traffic per step on {link}",
            )
    peak = gpu("H100-SXM").peak_flops("bf16")
    _accumulation(r, n, gpus)
    _why_not_zero3_70b(r, preset("70B"), hbm, peak, per_direction_bytes_per_s("InfiniBand-NDR"))
    tokens = WORKED_TOKENS
    r.add("worked_tokens", tokens, "tokens", "tokens per GPU per step in the worked problem")
    r.add("worked_compute_s", 6 * n * tokens / peak, "s", "7B forward + backward for those tokens at peak")


GPUS = 8  # the chapter's data-parallel size for 7B (an input: zero-memory.gpus)
BIG_GPUS = 64  # 70B's worked problem runs on 64 GPUs (an input: zero-memory.70b_gpus)
WORKED_TOKENS = 16384  # tokens per GPU per step in the cross-node worked problem (an input)
FIGURE_GPUS = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # the per-GPU figure's x axis (inputs)
ACCUMULATION_MICROBATCHES = 8  # a fine-tune accumulating 8 micro-batches per optimizer step (an input)
HIDE_MFU = 0.5  # compute at half the peak when asking what hides the gathers (an input; chapter 13's bands)
MICRO_SEQS = 1  # one sequence per micro-batch in 70B's activation count (an input the page states)
LARGE_CLUSTER_GPUS = 1024  # practice 6's cluster: what pure data parallelism does to the global batch


def _accumulation(r: Result, n: int, gpus: int) -> None:
    """Gradient accumulation breaks "stages 1 and 2 are free": ZeRO-2 reduce-scatters and ZeRO-3 gathers every
    micro-batch. Checked against the closed forms (m + 1)(N-1)⌈Ψ/N⌉b and 3m(N-1)⌈Ψ/N⌉b written out here."""
    m = ACCUMULATION_MICROBATCHES
    r.add("accum_microbatches", m, "micro-batches", "micro-batches accumulated per optimizer step (input)")
    phase = (gpus - 1) * shard_elements(n, gpus) * 2  # one bf16 ring phase, typed out as the reference
    for z, expected in ((0, 2 * phase), (1, 2 * phase), (2, (m + 1) * phase), (3, 3 * m * phase)):
        got = traffic_bytes_per_gpu(n, gpus, z, microbatches=m)["total_bytes"]
        r.add(f"z{z}_accum_traffic_bytes", got, "B", f"{STAGE_NAMES[z]}: bytes per GPU per step, {m} micro-batches")
        r.claim(
            f"{STAGE_NAMES[z]} with {m} accumulated micro-batches: bytes per GPU per step",
            got,
            expected,
            unit="B",
            formula={0: "2(N-1)⌈Ψ/N⌉b", 1: "2(N-1)⌈Ψ/N⌉b", 2: "(m+1)(N-1)⌈Ψ/N⌉b", 3: "3m(N-1)⌈Ψ/N⌉b"}[z],
        )
    ddp = traffic_bytes_per_gpu(n, gpus, 0)["total_bytes"]
    for z in (2, 3):
        ratio = traffic_bytes_per_gpu(n, gpus, z, microbatches=m)["total_bytes"] / ddp
        r.add(f"z{z}_accum_over_ddp", ratio, "", f"{STAGE_NAMES[z]} / DDP bytes per step at {m} micro-batches")


def _why_not_zero3_70b(r: Result, big, hbm: float, peak: float, link_bytes_per_s: float) -> None:
    """Why 70B on 64 GPUs is not trained with ZeRO-3 alone although its states fit: every micro-batch gathers
    the whole model over the network, the sequences that would hide it do not fit, and the global batch grows
    with every data-parallel GPU. Activations are Llama-exact (chapter 3's model_activation_bytes)."""
    from distlab.memory.activations import model_activation_bytes

    gpus, params, seq = BIG_GPUS, big.params(), big.seq
    per_micro = traffic_bytes_per_gpu(params, gpus, 3)["total_bytes"]
    comm_s = per_micro / link_bytes_per_s
    seq_compute_s = 6 * params * seq / (peak * HIDE_MFU)
    hide = -(-comm_s // seq_compute_s)
    states = model_state_bytes_per_gpu(params, gpus, 3)["total_bytes"]
    micro = MICRO_SEQS
    act = model_activation_bytes(big, seq, micro, attention="flash", recompute="none")
    act_full = model_activation_bytes(big, seq, micro, attention="flash", recompute="full")
    r.add("70b_seq", seq, "tokens", "Llama 2 70B's training sequence")
    r.add("70b_z3_micro_bytes", per_micro, "B", "70B, ZeRO-3 on 64 GPUs: bytes per GPU per micro-batch")
    r.add("70b_z3_micro_s", comm_s, "s", "... over one 400 Gb/s NIC per GPU")
    r.add("hide_mfu", HIDE_MFU, "fraction", "MFU assumed for the compute that should hide the gathers (input)")
    r.add("70b_seq_compute_s", seq_compute_s, "s", "forward + backward of one 4096-token sequence at that MFU")
    r.add("70b_hide_seqs", hide, "sequences", "sequences per GPU per micro-batch whose compute hides the gathers")
    r.add("70b_z3_free_bytes", hbm - states, "B", "memory left per GPU beside ZeRO-3's states")
    r.add("70b_seq_act_bytes", act, "B", "one sequence's activations, all 80 layers, no recompute (Llama-exact)")
    r.add("70b_seq_act_full_bytes", act_full, "B", "the same with full recomputation")
    r.add("70b_hide_act_full_bytes", hide * act_full, "B", "the hiding micro-batch's activations, full recompute")
    r.add("70b_hide_batch_tokens", gpus * hide * seq, "tokens", "global batch of that micro-batch on 64 GPUs")
    r.add("large_gpus", LARGE_CLUSTER_GPUS, "GPUs", "a large cluster (practice 6)")
    r.add("large_dp_batch_tokens", LARGE_CLUSTER_GPUS * micro * seq, "tokens", "one sequence per GPU, pure DP on it")
    ring = 3 * (gpus - 1) / gpus * params * 2
    r.claim("70B ZeRO-3 bytes per micro-batch = 3 (N-1)/N Ψ b", per_micro, ring, rel_tol=1e-6, unit="B")
    r.claim(
        "the gathers of one micro-batch take longer than one sequence's compute",
        comm_s,
        seq_compute_s,
        relation=">=",
        unit="s",
        formula="3(N-1)/N Ψb / B against 6Ψs / (peak x MFU)",
    )
    r.claim(
        "the hiding micro-batch is the fewest whole sequences whose compute covers the gathers",
        (hide - 1) * seq_compute_s < comm_s <= hide * seq_compute_s,
        True,
    )
    r.claim(
        "one sequence without recomputation does not fit beside ZeRO-3's states",
        act,
        hbm - states,
        relation=">=",
        unit="B",
    )
    from distlab.core.facts import value

    r.claim(
        "pure data parallelism on 1024 GPUs, one sequence each, reaches Llama 2's published global batch",
        LARGE_CLUSTER_GPUS * seq,
        value("scaling_laws.Llama2-70B.batch_tokens_million") * 1e6,
        relation=">=",
        unit="tokens",
        formula="Touvron et al. 2023, Table 1: a global batch of 4M tokens",
    )
    r.claim(
        "full recompute keeps about 2sbh per layer (the layer input in bf16) of one sequence",
        act_full,
        big.layers * 2 * seq * big.hidden,
        rel_tol=0.01,
        unit="B",
    )


def _traffic(r: Result, n: int, gpus: int) -> None:
    rows = []
    for z in STAGES:
        t = traffic_bytes_per_gpu(n, gpus, z)
        rows.append(
            [STAGE_NAMES[z]]
            + [
                Quantity(t[k], "B")
                for k in ("all_reduce_bytes", "reduce_scatter_bytes", "all_gather_bytes", "total_bytes", "volume_bytes")
            ]
        )
        r.add(f"z{z}_traffic_bytes", t["total_bytes"], "B", f"{STAGE_NAMES[z]}: bytes sent per GPU per step")
    r.table(
        "traffic",
        ["stage", "all-reduce", "reduce-scatter", "all-gather", "sent per GPU", "paper (N → ∞)"],
        rows,
        caption=f"Bytes each GPU sends per step, Llama 2 7B, {gpus} GPUs, bf16 gradients and parameters, "
        "ring collectives",
    )
    ddp, z3 = traffic_bytes_per_gpu(n, gpus, 0)["total_bytes"], traffic_bytes_per_gpu(n, gpus, 3)["total_bytes"]
    r.add("factor", (gpus - 1) / gpus, "", "(N - 1)/N")
    r.claim("ZeRO-3 / DDP traffic per step", z3 / ddp, 1.5, formula="3Ψ / 2Ψ")
    r.claim(
        "ZeRO-1 traffic = DDP traffic",
        traffic_bytes_per_gpu(n, gpus, 1)["total_bytes"],
        ddp,
        unit="B",
        formula="reduce-scatter + all-gather = one all-reduce",
    )


def _conventions(r: Result, gpus: int) -> None:
    from distlab.core.facts import entries

    rows = []
    for key, (tool, what, bpp, formula) in conventions(gpus).items():
        rows.append([tool, what, formula, round(bpp, 3)])
        r.add(f"conv_{key}", bpp, "B/param", f"{tool}: bytes per parameter at N = {gpus}")
    r.table("conventions", ["convention", "what it counts", "bytes/param per GPU", f"at N = {gpus}"], rows)
    # DeepSpeed's own constants (its code, transcribed in zero_estimators.toml) against our derivation from
    # chapter 1's categories, at two data-parallel sizes so that the replicated and the sharded part both count.
    ds = entries("zero_estimators")
    for key, entry in (
        ("deepspeed_zero2", "deepspeed-zero2"),
        ("deepspeed_zero2_old", "deepspeed-zero2-before-5099"),
        ("deepspeed_zero3", "deepspeed-zero3"),
    ):
        row = ds[entry]
        for n in (gpus, 3):
            r.claim(
                f"{conventions(n)[key][0]} at N = {n}: our derivation = DeepSpeed's code ({row['formula']})",
                conventions(n)[key][2],
                row["replicated_bytes_per_param"] + row["sharded_bytes_per_param"] / n,
                rel_tol=1e-12,
                unit="B/param",
            )
    # The docs' printed t5-3b examples: the ZeRO-2 one is the old formula's, the ZeRO-3 one the current code's.
    for example in ("deepspeed-doc-zero2-t5-3b", "deepspeed-doc-zero3-t5-3b"):
        ex, code = ds[example], ds[ds[example]["matches"]]
        p, n = int(ex["total_params"]), ex["gpus"]
        got = (
            code["replicated_bytes_per_param"] * p
            + int(code["sharded_bytes_per_param"] * p / n)
            + code["largest_layer_bytes_per_param"] * int(ex.get("largest_layer_params", 0))
        )
        r.claim(
            f"DeepSpeed docs' t5-3b example ({example.split('-')[2].upper()}) = {ex['matches']} formula",
            got / 2**30,
            ex["printed_gib_per_gpu"],
            abs_tol=0.01,  # printed to two decimals, in GiB labelled GB
            unit="GiB",
        )


def _figure(r: Result, n: int, hbm: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = list(FIGURE_GPUS)
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for z in STAGES:
        ax.plot(
            ns, [model_state_bytes_per_gpu(n, g, z)["total_bytes"] / 1e9 for g in ns], marker="o", label=STAGE_NAMES[z]
        )
    ax.axhline(hbm / 1e9, color="k", ls="--", lw=1, label="H100 SXM memory")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("data-parallel GPUs N")
    ax.set_ylabel("model states per GPU (GB)")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    figure_claim(r, ax, n, STAGE_NAMES)
    r.figure(
        "per_gpu",
        fig,
        "Model-state bytes per GPU for Llama 2 7B vs the number of GPUs (mixed-precision "
        "AdamW): DDP is flat, ZeRO-1 and ZeRO-2 approach 4Ψ and 2Ψ, ZeRO-3 falls as 16Ψ/N",
    )
