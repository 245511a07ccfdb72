"""The planner's memory model: bytes per GPU alive in each phase of a step, and the peak as the largest phase.

A step has three phases, and a tensor counts only in the phases it is alive in:

    forward         weights (and ZeRO-3's gathered layers), the optimizer state, the gradients that persist across
                    micro-batches (accumulation, or a stack's persistent gradient buffer), the activations every
                    micro-batch in flight keeps for backward, and the loss's copies of the logits
    backward        three moments, never alive together, the largest counts. The loss's backward: every saved
                    activation and the logits with their gradients, and only the gradients that persist across
                    micro-batches (no new weight gradient exists yet). The first layer's backward: the layers
                    gathered for it, its gradient before FSDP2 reduce-scatters it, and one layer's recomputed
                    activations. Backward's end: every gradient and the stack's gradient buckets, with what is left of
                    the activations (the micro-batch's own are freed layer by layer). Gradients grow while activations
                    shrink, each layer by layer, so the peak in between lies at one of these ends
    optimizer step  weights, gradients, optimizer state and the step's temporaries (foreach AdamW's copy of the
                    second moment, DeepSpeed's fp32 gradient partition); the activations are gone

The allocator's peak (what torch.cuda.max_memory_allocated shows) is the largest phase. Beside it the device holds
what the caching allocator reserved but cannot hand out (fragmentation: an assumption, FRAGMENTATION_FRACTION of the
device) and what is not the allocator's at all: NCCL's buffers (NCCL's documented defaults, per communicator) and
the CUDA context. `memory_bytes_per_gpu` (the fit quantity) is the allocator's peak plus NCCL's buffers; a plan fits
when reserved_bytes + outside_allocator_bytes <= the device's capacity, which is the same test.

Model state by precision and optimizer (bytes per parameter, `state_bytes_per_param`), with PEFT (`peft_states`):
a frozen base keeps only its weights (bf16, or NF4 at 4 bits + 0.127 bits of constants), the adapters keep the
precision's full state. Sources: distlab/data/memory_buffers.toml. Pure Python: no torch.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from distlab.core.facts import entries, value
from distlab.memory.activations import model_activation_bytes_per_layer
from distlab.memory.model_states import BYTES_PER_PARAM
from distlab.models.shapes import ModelShape
from distlab.planner.config import FRAGMENTATION_FRACTION, Cluster, Plan, Training, device_capacity_bytes
from distlab.planner.stages import expert_group, layer_params_local, split_params, stage_layers
from distlab.sharding.zero import bytes_per_param_by_state, model_state_bytes_per_gpu, shard_elements

PHASES = ("forward", "backward", "optimizer_step")
NCCL_CHANNELS = 32
"""Channels NCCL opens per communicator inside an H100 node (NVIDIA/nccl issue 1685's NCCL_DEBUG log of 8 x H100)."""
PEFT_GRAD_DTYPE_BYTES = 2  # the frozen base's activation gradients are bf16 like any other; adapters follow precision


@functools.cache
def _fact(entry: str, field: str) -> float:
    return float(value(f"memory_buffers.{entry}.{field}"))


# ---------------------------------------------------------------- bytes per parameter
@functools.cache
def state_bytes_per_param(precision: str, optimizer: str = "adamw") -> dict[str, float]:
    """{"params", "grads", "optimizer"} bytes per trained parameter.

    mixed 2 + 2 + 12; pure bf16 2 + 2 + 4 (bf16 moments, no master: 8 B); mixed-bf16-moments 2 + 4 + (4 + 2 + 2)
    (Megatron-Core's precision-aware optimizer: fp32 main grads and master, bf16 moments: 14 B); mixed-bf16-state
    2 + 2 + (2 + 2 + 2) (Apex's DistributedFusedAdam at dtype bf16: its parameter copy and moments in bf16: 10 B).
    The optimizer replaces Adam's two moments: sgd keeps one; adamw-8bit keeps two 1-byte moments plus an fp32
    constant per block of 2048 (bitsandbytes); adamw-in-backward keeps AdamW's state (its gradients: what it saves)."""
    if precision in BYTES_PER_PARAM:
        per = {k: float(v) for k, v in bytes_per_param_by_state(precision).items()}
        moments: float = sum(b for cat, b in BYTES_PER_PARAM[precision].items() if cat.startswith("Adam"))
    elif precision == "bf16":
        per = {
            "params": _fact("pure-bf16", "weight_bytes"),
            "grads": _fact("pure-bf16", "grad_bytes"),
            "optimizer": 2 * _fact("pure-bf16", "moment_bytes"),
        }
        moments = 2 * _fact("pure-bf16", "moment_bytes")
    elif precision == "mixed-bf16-moments":
        moments = 2 * _fact("precision-aware", "moment_bytes")
        per = {
            "params": _fact("precision-aware", "weight_bytes"),
            "grads": _fact("precision-aware", "main_grad_bytes"),
            "optimizer": _fact("precision-aware", "master_bytes") + moments,
        }
    elif precision == "mixed-bf16-state":
        moments = 2 * _fact("apex-adam-bf16-state", "moment_bytes")
        per = {
            "params": _fact("apex-adam-bf16-state", "weight_bytes"),
            "grads": _fact("apex-adam-bf16-state", "grad_bytes"),
            "optimizer": _fact("apex-adam-bf16-state", "master_bytes") + moments,
        }
    else:
        raise ValueError(f"unknown precision {precision!r}")
    master = per["optimizer"] - moments
    if optimizer == "sgd":
        per["optimizer"] = master + moments / 2
    elif optimizer in ("adamw-8bit", "adamw-8bit-paged"):
        states = 2 * _fact("adamw-8bit", "state_bytes_per_param")
        constants = 2 * _fact("adamw-8bit", "block_constant_bytes") / _fact("adamw-8bit", "block_size")
        per["optimizer"] = master + states + constants
    elif optimizer not in ("adamw", "adamw-in-backward"):
        raise ValueError(f"unknown optimizer {optimizer!r}")
    return per


def nf4_bytes_per_param() -> float:
    """QLoRA's NF4 weight with double quantization: 4 bits plus 8-bit constants per 64 weights and one fp32
    constant per 256 constants (8/64 + 32/(64 x 256) = 0.127 bits), in bytes."""
    block, blocks = _fact("qlora-nf4", "block_size"), _fact("qlora-nf4", "constant_block_size")
    bits = _fact("qlora-nf4", "weight_bits") + _fact("qlora-nf4", "constant_bits_dq") / block + 32 / (block * blocks)
    return bits / 8


def lora_params_per_layer(m: ModelShape, rank: int) -> int:
    """Adapter parameters of one layer: r (d_in + d_out) for every linear map of attention (q, k, v, o) and the MLP
    (gate, up, down for SwiGLU; up, down for GeLU), as QLoRA adapts every linear layer."""
    kv = m.kv * m.head_dim
    attention = (m.hidden + m.hidden) + 2 * (m.hidden + kv) + (m.hidden + m.hidden)
    mlp = (3 if m.mlp == "swiglu" else 2) * (m.hidden + m.ffn)
    return rank * (attention + mlp)


# ---------------------------------------------------------------- typed result
@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per GPU by category (device) on the most loaded stage, which phases each is alive in, and host bytes
    per GPU (CPU offload)."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    logits: float
    """The loss's copies of the logits alive at the end of forward (fp32 upcast, log-softmax output)."""
    gather_buffers: float
    comm_buffers: float
    """NCCL's buffers (outside the allocator)."""
    host: float
    logits_backward: float = 0.0
    """What the loss's backward adds over the logits (their gradients), at the start of backward."""
    recompute_working: float = 0.0
    """Full recomputation: one layer's activations rebuilt during its backward."""
    gradients_in_forward: float = 0.0
    """Gradients alive during forward: accumulated across micro-batches, or a persistent gradient buffer."""
    grad_buckets: float = 0.0
    """The stack's gradient buckets beside the gradients (PyTorch DDP without gradient_as_bucket_view)."""
    step_temporaries: float = 0.0
    """The optimizer step's temporaries (foreach AdamW's sqrt(v), DeepSpeed's fp32 gradient partition)."""
    context: float = 0.0
    """The CUDA context (outside the allocator)."""
    fragmentation: float = 0.0
    """Reserved by the caching allocator but not handed out (an assumption: FRAGMENTATION_FRACTION)."""
    autocast_cache: float = 0.0
    """torch.autocast's bf16 casts of the fp32 weights, cached in forward and saved for backward (DDP stacks)."""
    root_gather: float = 0.0
    """FSDP2's root module (embedding, final norm, output projection) gathered from forward through backward."""
    gather_at_loss: float | None = None
    """Of the gathered layers, those still gathered at the loss's backward (None: all of gather_buffers)."""
    layer_grads: float = 0.0
    """FSDP2: one layer's unsharded gradient, alive until its reduce-scatter."""
    activations_freed: float = 0.0
    """Of the activations, what the micro-batch's own backward has freed by its end."""
    head_input: float = 0.0
    """The output projection's saved input on the last stage (torchtitan under TP: all-gathered, whole)."""
    pipeline_buffers: float = 0.0
    """torch.distributed.pipelining's per-micro-batch stage outputs and receive buffers, alive through the step."""
    dequantized_head: float = 0.0
    """QLoRA with a quantized output head (lit-gpt): its weight dequantized (fp16, then bf16) at the loss's backward."""
    ring_attention: float = 0.0
    """torch's context-parallel ring attention in one layer's backward: the all-gathered K and V, fp32 accumulators."""

    @property
    def model_states(self) -> float:
        return self.weights + self.gradients + self.optimizer

    @property
    def _held(self) -> float:
        return self.weights + self.optimizer + self.autocast_cache + self.root_gather + self.pipeline_buffers

    @property
    def backward_start(self) -> float:
        """The loss's backward: every activation, the logits and their gradients, the gradients that persist."""
        gathered = self.gather_buffers if self.gather_at_loss is None else self.gather_at_loss
        return (
            self._held
            + gathered
            + self.gradients_in_forward
            + self.activations
            + self.head_input
            + self.logits
            + self.logits_backward
            + self.dequantized_head
        )

    @property
    def backward_layer(self) -> float:
        """The first layer's backward: its gathered weights, its unsharded gradient, one layer's recomputation."""
        return (
            self._held
            + self.gather_buffers
            + self.gradients_in_forward
            + self.activations
            + self.layer_grads
            + self.recompute_working
            + self.ring_attention
        )

    @property
    def backward_end(self) -> float:
        """Backward's end: every gradient and bucket, the activations not yet freed, one layer's recomputation."""
        rest = self.activations - self.activations_freed
        return self._held + self.gather_buffers + self.gradients + self.grad_buckets + rest + self.recompute_working

    @functools.cached_property
    def phases(self) -> dict[str, float]:
        """Bytes alive in each phase (the allocator's view)."""
        held = self._held + self.gather_buffers
        return {
            "forward": held + self.gradients_in_forward + self.activations + self.head_input + self.logits,
            "backward": max(self.backward_start, self.backward_layer, self.backward_end),
            "optimizer_step": self.weights
            + self.optimizer
            + self.gradients
            + self.grad_buckets
            + self.step_temporaries
            + self.pipeline_buffers,
        }

    def by_phase(self) -> dict[str, dict[str, float]]:
        """`distlab plan --json`'s memory_by_phase: each phase's categories (bytes) and its total."""
        wo = {
            "weights": self.weights,
            "optimizer": self.optimizer,
            "gather buffers": self.gather_buffers,
            "root gathered": self.root_gather,
            "autocast weight cache": self.autocast_cache,
            "pipeline buffers": self.pipeline_buffers,
        }
        fwd = wo | {
            "gradients": self.gradients_in_forward,
            "activations": self.activations,
            "head input": self.head_input,
            "logits": self.logits,
        }
        at_loss = self.gather_buffers if self.gather_at_loss is None else self.gather_at_loss
        moments = {
            self.backward_start: wo
            | {
                "gather buffers": at_loss,
                "gradients": self.gradients_in_forward,
                "activations": self.activations,
                "head input": self.head_input,
                "logits and their gradients": self.logits + self.logits_backward,
                "dequantized head": self.dequantized_head,
            },
            self.backward_layer: wo
            | {
                "gradients": self.gradients_in_forward,
                "activations": self.activations,
                "layer gradient": self.layer_grads,
                "recompute working set": self.recompute_working,
                "ring attention": self.ring_attention,
            },
            self.backward_end: wo
            | {
                "gradients": self.gradients,
                "gradient buckets": self.grad_buckets,
                "activations": self.activations - self.activations_freed,
                "recompute working set": self.recompute_working,
            },
        }
        bwd = moments[max(moments)]
        step = {
            "weights": self.weights,
            "optimizer": self.optimizer,
            "gradients": self.gradients,
            "gradient buckets": self.grad_buckets,
            "step temporaries": self.step_temporaries,
            "pipeline buffers": self.pipeline_buffers,
        }
        out = {}
        for name, cats in zip(PHASES, (fwd, bwd, step)):
            out[name] = {k: v for k, v in cats.items() if v} | {"total": sum(cats.values())}
        return out

    @functools.cached_property
    def allocator_peak_bytes(self) -> float:
        """What torch.cuda.max_memory_allocated would show: the largest phase."""
        return max(self.phases.values())

    @property
    def peak_phase(self) -> str:
        ph = self.phases
        return max(ph, key=lambda k: ph[k])

    @property
    def reserved_bytes(self) -> float:
        """What torch.cuda.max_memory_reserved would show: the peak plus the allocator's fragmentation."""
        return self.allocator_peak_bytes + self.fragmentation

    @property
    def outside_allocator_bytes(self) -> float:
        """NCCL's buffers and the CUDA context: in nvidia-smi, not in the allocator's figures."""
        return self.comm_buffers + self.context

    @property
    def device_bytes(self) -> float:
        """memory_bytes_per_gpu: the allocator's peak plus NCCL's buffers (what the plan itself asks of the GPU;
        compared with distlab.planner.config.usable_bytes, which already leaves out the context and fragmentation)."""
        return self.allocator_peak_bytes + self.comm_buffers

    def as_dict(self) -> dict[str, float]:
        """By category, as `distlab plan --json` prints memory_by_category."""
        return {
            "weights": self.weights,
            "gradients": self.gradients,
            "optimizer": self.optimizer,
            "activations": self.activations,
            "logits": self.logits,
            "logits gradients": self.logits_backward,
            "recompute working set": self.recompute_working,
            "gather buffers": self.gather_buffers,
            "root gathered": self.root_gather,
            "layer gradient": self.layer_grads,
            "autocast weight cache": self.autocast_cache,
            "gradient buckets": self.grad_buckets,
            "step temporaries": self.step_temporaries,
            "head input": self.head_input,
            "pipeline buffers": self.pipeline_buffers,
            "dequantized head": self.dequantized_head,
            "ring attention": self.ring_attention,
            "communication buffers": self.comm_buffers,
            "cuda context": self.context,
            "fragmentation": self.fragmentation,
        }


# ---------------------------------------------------------------- what is outside the allocator
@functools.cache
def nccl_bytes_per_communicator(channels: int = NCCL_CHANNELS) -> float:
    """NCCL's buffers of one communicator at its defaults: per channel, each connection holds one buffer per
    protocol (Simple NCCL_BUFFSIZE 4 MiB, LL 512 KiB, LL128 4.7 MB: src/init.cc)."""
    per_connection = sum(
        _fact("nccl-defaults", f) for f in ("simple_buffsize_bytes", "ll_buffsize_bytes", "ll128_buffsize_bytes")
    )
    return channels * _fact("nccl-defaults", "connections_per_channel") * per_connection


def communicators(p: Plan) -> int:
    """NCCL communicators a plan opens on each GPU: one per parallel dimension larger than 1."""
    return sum(1 for n in (p.tp, p.pp, p.dp * p.cp, p.cp, p.ep, p.dp_replicate) if n > 1)


@functools.cache
def context_bytes() -> float:
    return value("planner.memory-reserve.cuda_context_mib") * 2**20


# ---------------------------------------------------------------- the loss and the stacks' buffers
LOSS_OF_STACK = {
    "any": "fused",
    "megatron-core": "fused",
    "torchtitan": "eager",
    "fsdp2": "eager",
    "deepspeed": "eager",
}
"""The loss each stack computes: Megatron's vocab-parallel cross-entropy (fused: fp32 softmax kept, gradient written
in place) or PyTorch's cross_entropy on upcast logits (eager). torchtitan under TP computes it in DTensor's
loss_parallel (parallel: its log-softmax and fused backward written op by op, four fp32 copies at the backward)."""


def stack_loss(framework: str, loss: str = "stack", tp: int = 1) -> str:
    """The loss a run computes: the one `loss` names, or its stack's (torchtitan turns loss_parallel on with TP)."""
    if loss != "stack":
        return loss
    return "parallel" if framework == "torchtitan" and tp > 1 else LOSS_OF_STACK[framework]


@functools.cache
def loss_bytes_per_logit(framework: str, loss: str = "stack", tp: int = 1) -> tuple[float, float]:
    """(alive after forward, added by the loss's backward) bytes per logit element: the stack's own loss, or the
    one `loss` names (distlab.planner.config.LOSSES)."""
    row = entries("memory_buffers")[f"loss-{stack_loss(framework, loss, tp)}"]
    return float(row["forward_bytes_per_logit"]), float(row["backward_bytes_per_logit"]) - float(
        row["forward_bytes_per_logit"]
    )


def _stack_buffers(t: Training, p: Plan, grads: float, opt_shard_params: float, moment_bytes: float):
    """(gradient buckets, optimizer-step temporaries, gradients persist across micro-batches) for the stack."""
    f = t.framework
    buckets = grads * _fact("pytorch-ddp", "bucket_copy_of_gradients") if f in ("fsdp2",) and p.zero == 0 else 0.0
    temps = 0.0
    if f in ("fsdp2", "torchtitan") and t.optimizer in ("adamw", "adamw-in-backward"):
        temps = opt_shard_params * moment_bytes / 2 * _fact("foreach-adamw", "temporary_moment_copies")
    if f == "deepspeed" and p.zero >= 1:
        temps = opt_shard_params * _fact("deepspeed-zero", "fp32_grad_partition_bytes")
    persistent = f == "megatron-core" or p.microbatches > 1
    return buckets, temps, persistent


# ---------------------------------------------------------------- model state on one GPU
@functools.lru_cache(maxsize=65536)
def _states(params: int, group: int, zero: int, precision: str, offload_optimizer: bool, offload_params: bool):
    """zero.model_state_bytes_per_gpu in a chapter-1 convention; for pure bf16 and bf16 moments, the mixed layout's
    elements rescaled by the precision's bytes per state (bytes = bytes per element x elements, state by state)."""
    if precision in BYTES_PER_PARAM:
        return model_state_bytes_per_gpu(
            params, group, zero, precision=precision, offload_optimizer=offload_optimizer, offload_params=offload_params
        )
    base = model_state_bytes_per_gpu(
        params, group, zero, precision="mixed", offload_optimizer=offload_optimizer, offload_params=offload_params
    )
    mixed, per = bytes_per_param_by_state("mixed"), state_bytes_per_param(precision)
    out: dict[str, float] = dict(base)
    for s in ("params", "grads", "optimizer"):
        for key in (f"{s}_bytes", f"host_{s}_bytes"):
            out[key] = base[key] * per[s] / mixed[s]
    out["total_bytes"] = sum(out[f"{s}_bytes"] for s in ("params", "grads", "optimizer"))
    out["host_bytes"] = sum(out[f"host_{s}_bytes"] for s in ("params", "grads", "optimizer"))
    return out


def _moment_bytes(precision: str) -> float:
    if precision in BYTES_PER_PARAM:
        return float(sum(b for cat, b in BYTES_PER_PARAM[precision].items() if cat.startswith("Adam")))
    entry = {"bf16": "pure-bf16", "mixed-bf16-state": "apex-adam-bf16-state"}.get(precision, "precision-aware")
    return 2 * _fact(entry, "moment_bytes")


def _zero_stage(p: Plan, group: int) -> int:
    """The ZeRO stage whose memory a plan's state takes when sharded over `group` ranks. ZeRO-3 with a pipeline
    (torchtitan's FSDP + PP): each stage's weights are gathered once per step and kept, its gradients accumulate
    unsharded and reduce-scatter once at the end: ZeRO-1's memory. Over one rank nothing is sharded, unless offload
    moves the state to the host."""
    zero = 1 if (p.pp > 1 and p.zero == 3) else p.zero
    return zero if group > 1 or p.offload != "none" else 0


def model_states(m: ModelShape, t: Training, p: Plan, stage: int) -> dict[str, float]:
    """Weights, gradients, optimizer state and host bytes of one GPU of pipeline stage `stage`, and the parameters
    its optimizer shard covers."""
    group = p.shard_group  # dp x cp, or one replica's ranks x cp with hybrid sharding
    zero = _zero_stage(p, group)
    local = split_params(m, t.moe, p, stage)[0]  # an MoE's routed experts: memory_per_gpu
    if t.peft != "none":
        return _peft_states(m, t, p, stage, local, group, zero)
    st = _states(local, group, zero, t.precision, p.offload != "none", p.offload == "params")
    per = state_bytes_per_param(t.precision, t.optimizer)
    ratio = per["optimizer"] / state_bytes_per_param(t.precision)["optimizer"]
    shard = shard_elements(local, group) if zero >= 1 else local
    grads = st["grads_bytes"]
    if t.framework in ("torchtitan", "fsdp2") and p.pp > 1 and p.zero == 3 and t.precision == "mixed":
        # FSDP2 under a pipeline: gradient sync is off until the last micro-batch, and the unsharded gradients
        # accumulate in FSDP's reduce dtype (fp32 in torchtitan's default), not in the bf16 compute dtype
        grads = grads * _fact("fsdp2-pp-accumulation", "reduce_dtype_bytes") / state_bytes_per_param("mixed")["grads"]
    if t.optimizer == "adamw-in-backward":  # each gradient is applied and freed in backward: one layer's at most
        grads = min(grads, per["grads"] * sum(layer_params_local(m, t.moe, p)))
    return {
        "weights": st["params_bytes"],
        "gradients": grads,
        "optimizer": st["optimizer_bytes"] * ratio,
        "host": st["host_bytes"],
        "optimizer_shard_params": 0.0 if p.offload != "none" else shard,
    }


def _peft_states(m: ModelShape, t: Training, p: Plan, stage: int, local: int, group: int, zero: int):
    """A frozen base (bf16, or NF4 for QLoRA; sharded only by ZeRO-3) and the adapters with full training state."""
    adapters = math.ceil(lora_params_per_layer(m, t.lora_rank) * stage_layers(m, p.pp)[stage] / p.tp)
    base_bytes = nf4_bytes_per_param() if t.peft == "qlora" else 2.0
    base = (shard_elements(local, group) if zero >= 3 else local) * base_bytes
    if t.peft == "qlora" and t.peft_code == "litgpt" and stage == 0:
        # Lightning's bitsandbytes plugin replaces torch.nn.Linear only: the embedding stays bf16
        from distlab.planner.stages import embedding_params

        base += math.ceil(embedding_params(m) / p.tp) * (2.0 - base_bytes)
    st = _states(adapters, group, zero, t.precision, False, False)
    per = state_bytes_per_param(t.precision, t.optimizer)
    ratio = per["optimizer"] / state_bytes_per_param(t.precision)["optimizer"]
    return {
        "weights": base + st["params_bytes"],
        "gradients": st["grads_bytes"],
        "optimizer": st["optimizer_bytes"] * ratio,
        "host": 0.0,
        "optimizer_shard_params": shard_elements(adapters, group) if zero >= 1 else adapters,
    }


# ---------------------------------------------------------------- activations
def activation_bytes(m: ModelShape, t: Training, p: Plan, recompute: str | None = None) -> float:
    """One layer's activations kept for backward on one GPU, micro-batch of p.micro_batch sequences of s / cp
    (selective recomputation of other modules than the attention core: module_recompute_bytes)."""
    rc = p.recompute if recompute is None else recompute
    if rc == "selective" and t.recompute_modules != ("core_attn",):
        return module_recompute_bytes(
            m,
            t.seq // p.cp,
            p.micro_batch,
            p.tp,
            t.sequence_parallel and p.tp > 1,
            tuple(sorted(t.recompute_modules)),
            "flash" if t.attention == "flash" else "eager",
            t.dropout,
        )
    return _activations(
        m,
        t.seq // p.cp,
        p.micro_batch,
        p.tp,
        t.sequence_parallel and p.tp > 1,
        p.recompute if recompute is None else recompute,
        "flash" if t.attention == "flash" else "eager",
        t.dropout,
    )


@functools.lru_cache(maxsize=65536)
def _activations(m, seq, batch, tp, sp, recompute, attention, dropout) -> float:
    return model_activation_bytes_per_layer(
        m, seq, batch, tp=tp, sequence_parallel=sp, recompute=recompute, attention=attention, dropout=dropout
    )


def _drops(term, modules: tuple[str, ...], moe_layer: bool) -> bool:
    """Whether Megatron-Core's selective recomputation of `modules` frees this saved tensor (the checkpoint keeps
    the module's input, which an earlier term already holds). mlp is the dense MLP; moe and moe_act the MoE layer's."""
    mod, what = term.module, term.what
    if "mlp" in modules and not moe_layer and mod in ("mlp", "mlp.down"):
        return True
    if "moe" in modules and mod.startswith("mlp") and mod != "mlp.router":
        return True
    if "moe_act" in modules and mod == "mlp.experts" and what.endswith(("SiLU output", "down projection's input")):
        return True
    if "layernorm" in modules and what.startswith(("input of q, k, v", "input of gate", "router input")):
        return True
    return mod == "mlp.up" and "layernorm" in modules


@functools.lru_cache(maxsize=4096)
def module_recompute_bytes(m, seq, batch, tp, sp, modules, attention, dropout) -> float:
    """One layer's saved bytes when the listed modules are recomputed (distlab.memory.layer_activations' terms, less
    what each module's recomputation frees; the heavier of a dense and an MoE layer)."""
    from distlab.memory.activations import model_block
    from distlab.memory.layer_activations import saved_tensors

    if modules == ("op",):
        return op_policy_bytes(m, seq, batch, tp, sp)
    if ("moe" in modules or "moe_act" in modules) and not m.experts:
        raise ValueError(f"recompute modules moe and moe_act need a mixture-of-experts model; {m.name} is dense")
    kinds = [True, False] if m.experts and m.dense_layers else [None]
    rc = "selective" if "core_attn" in modules else "none"
    out = []
    for kind in kinds:
        terms = saved_tensors(
            model_block(m, moe=kind, dropout=dropout),
            seq,
            batch,
            attention=attention,
            recompute=rc,
            tp=tp,
            sequence_parallel=sp,
        )
        moe_layer = bool(m.experts) and kind is not False
        out.append(sum(x.bytes for x in terms if not _drops(x, modules, moe_layer)))
    return float(max(out))


def op_policy_bytes(m: ModelShape, seq: int, batch: int, tp: int, sp: bool) -> float:
    """torchtitan's per-op selective checkpointing of a dense layer: the block's input, the outputs of attention (O
    and its fp32 log-sum-exp) and of every other matmul in order (q, k, v, o, then gate, up, down or up, down: the
    1st, 3rd, 5th, 7th are saved); norms, activations and products are recomputed."""
    if m.experts:
        raise ValueError("recompute module op (torchtitan's per-op policy) is modelled for dense models")
    sb, rows = seq * batch, seq * batch // (tp if sp else 1)
    qd, kvd, f = m.heads * m.head_dim // tp, max(m.kv // tp, 1) * m.head_dim, m.ffn // tp
    outputs = [qd, kvd, kvd, m.hidden] + ([f, f, m.hidden] if m.mlp == "swiglu" else [f, m.hidden])
    saved = sum(width for i, width in enumerate(outputs, 1) if i % 2)
    return 2.0 * rows * m.hidden + 2.0 * sb * (saved + qd) + 4.0 * batch * (m.heads // tp) * seq


def autocast_cache_bytes(m: ModelShape, t: Training, p: Plan) -> float:
    """PyTorch DDP under torch.autocast (torchtitan's and plain PyTorch's data parallelism without sharding): the
    weights stay fp32 and autocast caches each one's bf16 cast for the forward (cache_enabled defaults to True); the
    matmuls save those casts for backward, so 2 B per local parameter stay alive through backward."""
    if t.framework not in ("torchtitan", "fsdp2") or p.zero != 0 or t.precision != "mixed" or t.peft != "none":
        return 0.0
    return _fact("autocast-cache", "cast_bytes") * sum(split_params(m, t.moe, p))


def zero3_gather_bytes(m: ModelShape, t: Training, p: Plan) -> float:
    """ZeRO-3's gathered bf16 weights beside the shards. FSDP: the layer computing and the one prefetched (two
    layers), or with reshard_after_forward off every layer gathered in forward until its backward (the whole local
    model). DeepSpeed: up to stage3_max_live_parameters resident plus the stage3_prefetch_bucket_size buffer, at
    its documented defaults, never more than the local model."""
    if p.zero != 3:
        return 0.0
    local = sum(split_params(m, t.moe, p))
    if t.framework == "deepspeed":
        live = min(_fact("deepspeed-zero3", "max_live_parameters"), local)
        return 2.0 * (live + min(_fact("deepspeed-zero3", "prefetch_bucket_size"), local))
    if not t.reshard_after_forward and p.pp == 1:
        return 2.0 * local
    return 2 * 2 * sum(layer_params_local(m, t.moe, p))


def fsdp2_buffers(m: ModelShape, t: Training, p: Plan) -> tuple[float, float | None, float]:
    """(root gathered, layers gathered at the loss's backward, one layer's unsharded gradient) for FSDP2 without a
    pipeline. The root module (embedding, final norm, output) is not resharded after forward: its parameters are
    needed as soon as backward begins (fully_shard's reshard_after_forward). At the loss, torchtitan still holds its
    last block (it keeps that one gathered), plain FSDP2 none. Each layer's gradient is whole until its
    reduce-scatter. Other stacks: (0, None, 0)."""
    if p.zero != 3 or p.pp > 1 or t.framework not in ("fsdp2", "torchtitan"):
        return 0.0, None, 0.0
    from distlab.planner.stages import embedding_params, head_params

    bytes_ = _fact("fsdp2-buffers", "param_bytes")
    root = bytes_ * (embedding_params(m) + head_params(m, 1)) / p.tp
    layer = bytes_ * sum(layer_params_local(m, t.moe, p))
    kept = _fact("fsdp2-buffers", f"layers_kept_at_loss_{t.framework}")
    return root, kept * layer, layer


def in_flight(p: Plan, stage: int) -> float:
    """Micro-batches whose activations stage `stage` holds at once, in units of the stage's layers: 1F1B's p - s
    (its warm-up plus one); the interleaved schedule's warm-up of 2 (p - s - 1) + (v - 1) p model chunks plus the one
    in flight, each chunk 1/v of the stage (Megatron-Core, pipeline_parallel/schedules.py,
    forward_backward_pipelining_with_interleaving): p + (p - 1)/v on stage 0 as Korthikanti et al. 2022 (Section
    4.2) state, and still about p - (p - 1)/v on the last. Never more than the m micro-batches there are."""
    if p.pp == 1:
        return 1.0
    if p.schedule == "interleaved":
        chunks = 2 * (p.pp - stage - 1) + (p.virtual - 1) * p.pp + 1
        return min(chunks / p.virtual, p.microbatches)
    return min(p.pp - stage, p.microbatches)


def boundary_bytes(m: ModelShape, t: Training, p: Plan) -> float:
    """One micro-batch's activation between two blocks on one GPU (bf16; sequence-sharded under TP with sequence
    parallelism): what a pipeline stage sends and receives."""
    tokens = p.micro_batch * (t.seq // p.cp)
    return 2.0 * tokens * m.hidden / (p.tp if t.sequence_parallel and p.tp > 1 else 1)


def head_input_bytes(m: ModelShape, t: Training, p: Plan) -> float:
    """torchtitan: the output projection's input, saved for its weight gradient; under TP its ColwiseParallel plan
    all-gathers the sequence-parallel norm's output first, so the whole micro-batch's (not 1/tp); and what the eager
    final norm saves (its fp32 upcast and bf16 output, on its own tokens). Other stacks: 0 (not yet counted; Megatron's
    output layer saves its input sharded)."""
    if t.framework != "torchtitan":
        return 0.0
    tokens = p.micro_batch * (t.seq // p.cp)
    norm_tokens = tokens / (p.tp if t.sequence_parallel and p.tp > 1 else 1)
    gathered = _fact("torchtitan-output-gather", "gathered_input_bytes") * tokens * m.hidden
    return gathered + _fact("torchtitan-output-gather", "final_norm_saved_bytes") * norm_tokens * m.hidden


def pipeline_buffer_bytes(m: ModelShape, t: Training, p: Plan, stage: int, logit_bytes: float) -> float:
    """torch.distributed.pipelining (torchtitan's pipeline) keeps, per micro-batch of the step, every stage's output
    (output_chunks, until the next step; on the last stage the logits, `logit_bytes` each) and preallocates a
    gradient receive buffer (all stages but the last) and an activation receive buffer (all but the first)."""
    if t.framework != "torchtitan" or p.pp == 1:
        return 0.0
    per = _fact("pipelining-stage-buffers", "buffers_per_microbatch")
    boundary = boundary_bytes(m, t, p)
    first, last = stage == 0, stage == p.pp - 1
    buffers = (logit_bytes if last else boundary) + (0.0 if last else boundary) + (0.0 if first else boundary)
    return per * p.microbatches * buffers


def ring_attention_bytes(m: ModelShape, t: Training, p: Plan) -> float:
    """torch's context_parallel (torchtitan's CP), one layer's attention backward: the ring runs inside one SDPA
    dispatch, so autograd saves what it saves without CP; while it runs it holds the whole sequence's K and V
    (all-gathered once, the rotate method torchtitan defaults to), the local copy it sent, fp32 accumulators of dq,
    dk, dv, one ring step's gradients and the fp32 dk, dv it sends and receives (memory_buffers.toml ring-attention).
    Other stacks, or CP 1: 0."""
    if t.framework != "torchtitan" or p.cp == 1:
        return 0.0
    e = "ring-attention"
    kv_b, acc_b = _fact(e, "kv_bytes"), _fact(e, "accumulator_bytes")
    tokens = p.micro_batch * (t.seq // p.cp)
    q = tokens * (m.heads // p.tp) * m.head_dim
    kv = tokens * max(m.kv // p.tp, 1) * m.head_dim
    gathered = kv_b * p.cp * 2 * kv + kv_b * 2 * kv
    return gathered + acc_b * (q + 2 * kv) + kv_b * (q + 2 * kv) + 2 * acc_b * 2 * kv


def litgpt_lora_saved_bytes(m: ModelShape, t: Training, p: Plan) -> float:
    """Lit-GPT 8641822's LoRA and QLoRA fine-tune (finetune/lora.py: bf16-true, eager, LoRA on q and v with dropout
    0.05), one layer's saved bytes per micro-batch, op by op from its code (memory_buffers.toml litgpt-lora-code):

        norms        RMSNorm without upcast: x * x saves x, 2h each (the frozen weight's product saves the weight)
        attention    SDPA saves q and k (new tensors from RoPE's cat) and v, a view of the fused qkv output, so the
                     whole qkv, 2(h + 2kv) (grouped queries: k and v are expanded copies, 2h each), O 2h (the
                     projection's input is a view of it), the log-sum-exp 4 x heads
        LoRA (q, v)  the dropout's mask 1h and output 2h (lora_A's input); zero_pad's index_copy keeps its source,
                     B's output for q and v, 2(h + kv)
        MLP          SiLU's input and output and the up projection, 2f each
        frozen base  nothing more with LoRA (autograd saves mm's input only for the weight's gradient); QLoRA's
                     MatMul4Bit keeps every input: qkv's 2h, fc_1's and fc_2's 2h (one tensor), the down projection's 2f

    Per token (h hidden, kv = kv_heads x head_dim, f ffn), with no recomputation, on one GPU."""
    if t.peft == "none" or p.tp != 1 or p.recompute != "none":
        raise ValueError("the lit-gpt count is for a LoRA or QLoRA run on one GPU without recomputation")
    b = _fact("litgpt-lora-activations", "saved_bytes_per_element")
    mask = _fact("litgpt-lora-activations", "dropout_mask_bytes")
    h, kv, f = m.hidden, m.kv * m.head_dim, m.ffn
    tokens = (t.seq // p.cp) * p.micro_batch
    qkv = b * (h + kv + (h + 2 * kv)) if m.kv == m.heads else b * 3 * h  # q, k and the kept qkv; or q, k, v copies
    attention = qkv + b * h + 4.0 * m.heads
    lora = mask * h + b * h + b * (h + kv)
    mlp = 3 * b * f
    per_token = 2 * b * h + attention + lora + mlp
    if t.peft == "qlora":
        per_token += b * h + b * h + b * f
    return per_token * tokens


def dequantized_head_bytes(m: ModelShape, t: Training) -> float:
    """QLoRA under lit-gpt: its lm_head is a bitsandbytes Linear4bit, dequantized to fp16 and cast to bf16 for each
    chunk's forward and backward (4 B per weight), alive at the loss's backward beside every activation."""
    if t.peft != "qlora" or t.peft_code != "litgpt":
        return 0.0
    return _fact("bnb-dequantize", "dequantized_copies_bytes") * m.vocab * m.hidden


def rmsnorm_upcast_extra_bytes(m: ModelShape, t: Training, p: Plan) -> float:
    """One layer's saved bytes beyond chapter 3's count when its RMSNorms run eagerly in fp32 (torchtune's
    RMSNorm: `x_fp32 = x.float()`, pow and the product keep x_fp32, the scale's product keeps `x_normed` when the
    scale trains), on the norms' tokens (1/tp under sequence parallelism): per token and norm 4 B (+ 2 B) - 2 B."""
    if not t.rmsnorm_upcast:
        return 0.0
    e = "rmsnorm-eager-upcast"
    normed = _fact(e, "normed_bytes") if t.peft == "none" else 0.0  # a frozen scale's product keeps only the scale
    per_norm = _fact(e, "upcast_bytes") + normed - _fact(e, "counted_input_bytes")
    tokens = (t.seq // p.cp) * p.micro_batch / (p.tp if t.sequence_parallel and p.tp > 1 else 1)
    return _fact(e, "norms_per_layer") * per_norm * tokens * m.hidden


# ---------------------------------------------------------------- the phases
def memory_per_gpu(m: ModelShape, c: Cluster, t: Training, p: Plan) -> MemoryBreakdown:
    """Bytes per GPU by category and phase on the most loaded stage (the largest allocator peak), and host bytes."""
    layers = stage_layers(m, p.pp)
    litgpt = t.peft != "none" and t.peft_code == "litgpt"
    per_layer = litgpt_lora_saved_bytes(m, t, p) if litgpt else activation_bytes(m, t, p)
    if p.recompute == "none":  # with recomputation the norms' tensors are rebuilt, not kept
        per_layer += rmsnorm_upcast_extra_bytes(m, t, p)
    working = (
        activation_bytes(m, t, p, "selective" if t.attention == "flash" else "none") if p.recompute == "full" else 0.0
    )
    if t.peft == "qlora":  # the NF4 base is dequantized to bf16 one matrix at a time: the largest one
        working = max(working, 2 * m.hidden * m.ffn / p.tp)
    fwd_logit, bwd_logit = loss_bytes_per_logit(t.framework, t.loss, p.tp)
    logit_elements = t.seq // p.cp * p.micro_batch * m.vocab / p.tp
    gather = zero3_gather_bytes(m, t, p)
    root, kept_at_loss, layer_grads = fsdp2_buffers(m, t, p)
    comm = nccl_bytes_per_communicator() * communicators(p)
    context = context_bytes()
    fragmentation = FRAGMENTATION_FRACTION * device_capacity_bytes(c.gpu)
    moe = t.moe
    best: MemoryBreakdown | None = None
    for s in sorted({0, p.pp - 1}):  # the first stage holds the most micro-batches and layers, the last the logits
        st = model_states(m, t, p, s)
        weights, grads, opt = st["weights"], st["gradients"], st["optimizer"]
        opt_shard, host = st["optimizer_shard_params"], st["host"]
        routed = split_params(m, moe, p, s)[1]
        if routed:  # this GPU's experts, sharded over the ranks that hold the same experts (dp x cp / ep)
            group = expert_group(p)
            zero = _zero_stage(p, group)
            ex = _states(routed, group, zero, t.precision, p.offload != "none", p.offload == "params")
            weights += ex["params_bytes"]
            grads += ex["grads_bytes"]
            opt += ex["optimizer_bytes"]
            host += ex["host_bytes"]
            opt_shard += 0.0 if p.offload != "none" else (shard_elements(routed, group) if zero >= 1 else routed)
        last = s == p.pp - 1
        acts = per_layer * layers[s] * in_flight(p, s)
        own = per_layer * (layers[s] - 1) / (p.virtual if p.schedule == "interleaved" else 1)  # this micro-batch's
        if (
            t.activation_offload
        ):  # two layers on the device (the one computing, the one in transfer), the rest on the host
            on_device = min(acts, 2 * per_layer)
            host, acts = host + acts - on_device, on_device
            own = 0.0  # what is on the device is the layer computing and the one in transfer
        buckets, temps, persistent = _stack_buffers(t, p, grads, opt_shard, _moment_bytes(t.precision))
        if t.framework == "deepspeed" and p.zero == 3:  # the gradient bucket of reduce_bucket_size elements
            buckets += 2 * min(_fact("deepspeed-zero3", "reduce_bucket_size"), sum(split_params(m, t.moe, p)))
        head = head_input_bytes(m, t, p) if last else 0.0
        chunks = pipeline_buffer_bytes(m, t, p, s, 2.0 * logit_elements)
        mb = MemoryBreakdown(
            head_input=head,
            pipeline_buffers=chunks,
            dequantized_head=dequantized_head_bytes(m, t) if last else 0.0,
            ring_attention=ring_attention_bytes(m, t, p),
            weights=weights,
            gradients=grads,
            optimizer=opt,
            activations=acts,
            logits=fwd_logit * logit_elements if last else 0.0,
            logits_backward=bwd_logit * logit_elements if last else 0.0,
            recompute_working=working,
            gather_buffers=gather,
            gradients_in_forward=grads if persistent else 0.0,
            autocast_cache=autocast_cache_bytes(m, t, p),
            root_gather=root,
            gather_at_loss=kept_at_loss,
            layer_grads=layer_grads,
            activations_freed=min(max(own, 0.0), acts),
            grad_buckets=buckets,
            step_temporaries=temps,
            comm_buffers=comm,
            context=context,
            fragmentation=fragmentation,
            host=host,
        )
        if best is None or mb.device_bytes > best.device_bytes:
            best = mb
    if best is None:  # cannot happen: the loop visits stage 0
        raise ValueError(f"no pipeline stage to size for {p.label()}")
    return best


def fits(m: ModelShape, c: Cluster, t: Training, p: Plan, mem: MemoryBreakdown | None = None) -> bool:
    """reserved + outside the allocator <= the device's capacity, host bytes within 90 % of the host's share;
    optimizer-in-backward cannot accumulate gradients over micro-batches (torchtune)."""
    if t.optimizer == "adamw-in-backward" and p.microbatches > 1:
        return False
    mem = mem or memory_per_gpu(m, c, t, p)
    host_budget = c.host_bytes / c.gpus_per_node * 0.9  # the host keeps a tenth for itself
    return mem.reserved_bytes + mem.outside_allocator_bytes <= device_capacity_bytes(c.gpu) and mem.host <= host_budget
