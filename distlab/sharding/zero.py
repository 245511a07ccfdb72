"""Model-state memory and traffic per GPU for DDP, ZeRO-1, ZeRO-2 and ZeRO-3/FSDP (Rajbhandari et al. 2020,
"ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", https://arxiv.org/abs/1910.02054).

Bytes per parameter come from chapter 1 (`distlab.memory.model_states.BYTES_PER_PARAM`, measured there by
adamw-bytes), grouped into three states: parameters (the weights forward and backward read), gradients, and
optimizer state (everything else: the fp32 master copy and Adam's m and v in mixed precision). Stage z shards:

    zero 0 (DDP)   nothing                               2Ψ + 2Ψ + 12Ψ
    zero 1         optimizer state                        2Ψ + 2Ψ + 12⌈Ψ/N⌉
    zero 2         + gradients                            2Ψ + 2⌈Ψ/N⌉ + 12⌈Ψ/N⌉
    zero 3 / FSDP  + parameters                           2⌈Ψ/N⌉ + 2⌈Ψ/N⌉ + 12⌈Ψ/N⌉

Rounding rule for uneven sharding: a sharded state is a flat buffer padded to N·⌈Ψ/N⌉ elements, so every
rank holds ⌈Ψ/N⌉ elements of it (the last rank's shard ends in at most N - 1 padding elements). This is
what DeepSpeed's and FSDP1's flat buffers do; FSDP2 pads each tensor's first dimension instead (the
fsdp2-equivalence experiment measures that). All results are exact integers.

Offload (the ZeRO-Offload design, Ren et al. 2021, https://arxiv.org/abs/2101.06840, Figure 2; needs
mixed precision): `offload_optimizer` keeps the rank's optimizer-state shard on the host and runs the
update there, so the rank's gradient shard goes to the host too (2⌈Ψ/N⌉ host bytes); the GPU keeps only
what its stage leaves unsharded (ZeRO-1's full gradient) plus transient buckets, which are not model state
and not counted. `offload_params` (ZeRO-3 only) keeps the parameter shard on the host; layers are
gathered to the GPU transiently. DeepSpeed allows both only with these stages, and so do we.

Traffic per step per GPU (ring collectives, bytes each rank sends; the buffer is Ψ elements of b bytes):
each ring phase sends N - 1 chunks of ⌈Ψ/N⌉ elements, i.e. (N - 1)/N of the buffer when N divides Ψ.

    DDP       one all-reduce (reduce-scatter + all-gather phases)    2 (N-1) ⌈Ψ/N⌉ b  -> 2Ψb
    ZeRO-1/2  reduce-scatter gradients + all-gather parameters     2 (N-1) ⌈Ψ/N⌉ b  -> 2Ψb
    ZeRO-3    all-gather (forward) + all-gather (backward) + RS    3 (N-1) ⌈Ψ/N⌉ b  -> 3Ψb

With m accumulated micro-batches per step, ZeRO-2's reduce-scatter and ZeRO-3's three phases happen per
micro-batch: (m + 1)Ψb and 3mΨb per step, against DDP's and ZeRO-1's 2Ψb.
"""

from __future__ import annotations

from distlab.core.cli import MAX_GPUS, MAX_PARAMS, command, emit, parser, positive
from distlab.core.formatting import format_quantity
from distlab.memory.model_states import BYTES_PER_PARAM, model_state_bytes

STAGES = (0, 1, 2, 3)


STAGE_NAMES = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3 / FSDP"}


STATES = ("params", "grads", "optimizer")


def state_of(category: str) -> str:
    """Which of the three states a chapter-1 category belongs to."""
    if category.startswith("weights"):
        return "params"
    if category.startswith("gradients"):
        return "grads"
    return "optimizer"


def bytes_per_param_by_state(precision: str = "mixed") -> dict[str, int]:
    """{"params": 2, "grads": 2, "optimizer": 12} in mixed precision, from chapter 1's categories."""
    out = dict.fromkeys(STATES, 0)
    for category, nbytes in model_state_bytes(1, precision).items():
        out[state_of(category)] += nbytes
    return out


def shard_elements(params: int, gpus: int) -> int:
    """⌈Ψ/N⌉: elements of a sharded state each rank holds (flat buffer padded to a multiple of N)."""
    return -(-params // gpus)


def _check(params, gpus, zero) -> None:
    for name, v in (("params", params), ("gpus", gpus)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if zero not in STAGES:
        raise ValueError(f"zero must be one of 0, 1, 2, 3, not {zero!r}")


def model_state_bytes_per_gpu(
    params: int,
    gpus: int,
    zero: int,
    *,
    offload_optimizer: bool = False,
    offload_params: bool = False,
    precision: str = "mixed",
) -> dict[str, int]:
    """Model-state bytes one GPU keeps between steps (device memory), and on the host when offloading.

    Keys: params_bytes, grads_bytes, optimizer_bytes, total_bytes (device); host_params_bytes,
    host_grads_bytes, host_optimizer_bytes, host_bytes (host memory per GPU). Exact integers.
    """
    _check(params, gpus, zero)
    if offload_optimizer and zero < 1:
        raise ValueError("--offload-optimizer needs ZeRO stage 1, 2 or 3 (the host holds the rank's shard)")
    if offload_params and zero < 3:
        raise ValueError("--offload-params needs ZeRO stage 3 (only stage 3 shards the parameters)")
    if (offload_optimizer or offload_params) and precision != "mixed":
        raise ValueError("offload is modelled for mixed precision only (the ZeRO-Offload design)")
    per = bytes_per_param_by_state(precision)
    shard = shard_elements(params, gpus)
    elements = {
        "params": shard if zero >= 3 else params,
        "grads": shard if zero >= 2 else params,
        "optimizer": shard if zero >= 1 else params,
    }
    device = {s: per[s] * elements[s] for s in STATES}
    host = dict.fromkeys(STATES, 0)
    if offload_optimizer:
        host["optimizer"], device["optimizer"] = device["optimizer"], 0
        host["grads"] = per["grads"] * shard  # the host-side update reads the rank's gradient shard
        if zero >= 2:
            device["grads"] = 0  # the reduced shard streams to the host; only transient buckets remain
    if offload_params:
        host["params"], device["params"] = device["params"], 0
    out = {f"{s}_bytes": device[s] for s in STATES}
    out["total_bytes"] = sum(device.values())
    out |= {f"host_{s}_bytes": host[s] for s in STATES}
    out["host_bytes"] = sum(host.values())
    return out


def traffic_bytes_per_gpu(
    params: int, gpus: int, zero: int, bytes_per_elem: int = 2, *, microbatches: int = 1
) -> dict[str, int]:
    """Bytes one GPU sends per step, by collective, for stage `zero` (ring algorithms).

    Keys: all_reduce_bytes, reduce_scatter_bytes, all_gather_bytes, total_bytes (with the (N-1)/N factor,
    as (N - 1)·⌈Ψ/N⌉ elements per ring phase) and volume_bytes (the ZeRO paper's 2Ψ / 3Ψ, its N -> ∞ limit).

    With gradient accumulation over `microbatches` micro-batches per step, DDP and ZeRO-1 keep the full
    gradient and reduce once per step (no_sync); ZeRO-2 keeps only its gradient shard, so it reduce-scatters
    after every micro-batch's backward (DeepSpeed's stage 2); ZeRO-3 frees the gathered weights after each
    use, so it all-gathers twice and reduce-scatters once per micro-batch (FSDP's reshard-after-forward).
    """
    _check(params, gpus, zero)
    for name, v in (("bytes_per_elem", bytes_per_elem), ("microbatches", microbatches)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    phase = (gpus - 1) * shard_elements(params, gpus) * bytes_per_elem  # one ring reduce-scatter or all-gather
    m = microbatches
    out = {"all_reduce_bytes": 0, "reduce_scatter_bytes": 0, "all_gather_bytes": 0}
    if zero == 0:
        out["all_reduce_bytes"] = 2 * phase
    else:
        out["reduce_scatter_bytes"] = (m if zero >= 2 else 1) * phase
        out["all_gather_bytes"] = 2 * m * phase if zero == 3 else phase
    out["total_bytes"] = sum(out.values())
    out["volume_bytes"] = {0: 2, 1: 2, 2: m + 1, 3: 3 * m}[zero] * params * bytes_per_elem
    return out


# ---------------------------------------------------------------- other tools' conventions
def conventions(gpus: int) -> dict[str, tuple[str, str, float, str]]:
    """key -> (tool, what it counts, bytes per parameter per GPU at `gpus`, formula) for the conventions
    readers meet, derived from chapter 1's dtype sizes (an fp32 gradient costs what chapter 1's fp32
    gradient costs). Sources: Megatron-LM's distributed-optimizer guide, DeepSpeed's memory estimators
    (distlab/data/zero_estimators.toml: the code's formulas, before and since DeepSpeed PR 5099)."""
    mixed = bytes_per_param_by_state("mixed")
    fp32_grad = bytes_per_param_by_state("fp32")["grads"]
    p, g, o = mixed["params"], mixed["grads"], mixed["optimizer"]
    ours, n = p + g + o, gpus
    return {
        "zero_paper": (
            "ZeRO paper, this site (DDP)",
            "bf16 weights and gradients, fp32 master, m, v",
            ours,
            f"{p} + {g} + {o} = {ours}",
        ),
        "megatron": (
            "Megatron-LM, bf16 params + fp32 grads",
            "gradients accumulated in fp32 (main_grad)",
            p + fp32_grad + o,
            f"{p} + {fp32_grad} + {o} = {p + fp32_grad + o}",
        ),
        "megatron_distributed": (
            "Megatron-LM distributed optimizer",
            "ZeRO-1 with fp32 gradients",
            p + fp32_grad + o / n,
            f"{p + fp32_grad} + {o}/N",
        ),
        "zero1": ("this site, ZeRO-1", "bf16 gradients, optimizer sharded", p + g + o / n, f"{p + g} + {o}/N"),
        "deepspeed_zero2": (
            "DeepSpeed estimator, ZeRO-2 (since PR 5099, v0.14.3: current)",
            "bf16 weights replicated; bf16 and fp32 gradients and the optimizer sharded",
            p + (g + fp32_grad + o) / n,
            f"{p} + {g + fp32_grad + o}/N",
        ),
        "deepspeed_zero2_old": (
            "DeepSpeed estimator, ZeRO-2 (before PR 5099, to v0.14.2; still the docs' example)",
            "bf16 weights and gradients replicated (ZeRO-2 shards gradients), fp32 gradients and optimizer sharded",
            p + g + (o + fp32_grad) / n,
            f"{p + g} + {o + fp32_grad}/N",
        ),
        "deepspeed_zero3": (
            "DeepSpeed estimator, ZeRO-3",
            "the same, all sharded (plus the largest layer)",
            (p + fp32_grad + o) / n,
            f"{p + fp32_grad + o}/N",
        ),
        "zero3": ("this site, ZeRO-3", "everything sharded", ours / n, f"{ours}/N"),
    }


# ---------------------------------------------------------------- the `memory` calculator
@command("memory", "model-state bytes per GPU for DDP / ZeRO-1 / ZeRO-2 / ZeRO-3, with CPU offload")
def memory_command(argv: list[str]) -> int:
    p = parser(
        "memory",
        "Model-state bytes per GPU (parameters, gradients, optimizer state) in the\n"
        "mixed-precision AdamW convention of chapter 1 (2 + 2 + 12 bytes per parameter).\n"
        "Sharded states hold ceil(P/N) elements per GPU. Activations are not included.",
    )
    p.add_argument("--params", type=positive(int, MAX_PARAMS), required=True, help="parameter count (7e9 works)")
    p.add_argument("--gpus", type=positive(int, MAX_GPUS), required=True, help="data-parallel size N")
    p.add_argument("--zero", type=int, choices=STAGES, required=True, help="ZeRO stage (0 = DDP, 3 = FSDP)")
    p.add_argument("--offload-optimizer", action="store_true", help="optimizer state (and gradient shard) on host")
    p.add_argument("--offload-params", action="store_true", help="parameter shard on host (ZeRO-3 only)")
    p.add_argument(
        "--precision",
        default="mixed",
        choices=sorted(BYTES_PER_PARAM),
        help="byte convention of chapter 1 (default mixed)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    a = p.parse_args(argv)
    out = model_state_bytes_per_gpu(
        a.params,
        a.gpus,
        a.zero,
        offload_optimizer=a.offload_optimizer,
        offload_params=a.offload_params,
        precision=a.precision,
    )
    out |= {
        "params": a.params,
        "gpus": a.gpus,
        "zero": a.zero,
        "offload_optimizer": a.offload_optimizer,
        "offload_params": a.offload_params,
        "precision": a.precision,
        "shard_params": shard_elements(a.params, a.gpus),
    }
    rows = [("parameters", "params"), ("gradients", "grads"), ("optimizer", "optimizer")]
    text = [f"{STAGE_NAMES[a.zero]}, {a.params:,} parameters on {a.gpus} GPUs ({a.precision}), per GPU:"]
    text += [
        f"  {label:<11} {format_quantity(out[f'{k}_bytes'], 'B'):>10}"
        + (f"   host {format_quantity(out[f'host_{k}_bytes'], 'B')}" if out[f"host_{k}_bytes"] else "")
        for label, k in rows
    ]
    text.append(
        f"  {'total':<11} {format_quantity(out['total_bytes'], 'B'):>10}"
        + (f"   host {format_quantity(out['host_bytes'], 'B')}" if out["host_bytes"] else "")
    )
    emit(out, a.json, "\n".join(text))
    return 0
