"""The planner's memory by phase (distlab.planner.memory) against references typed here: the bytes per parameter each
source prints (torchtune's pure bf16, Megatron-Core's precision-aware optimizer, bitsandbytes' 8-bit blocks, the
QLoRA paper's 4 + 0.127 bits), NCCL's default buffer sizes, LoRA's adapter count worked by hand for Llama 2 13B, and
the phase rule (a peak is one phase's sum, never the sum of every category)."""

import math

import pytest

from distlab.models.shapes import ModelShape, preset
from distlab.planner.config import Plan, Training, cluster, device_capacity_bytes, usable_bytes
from distlab.planner.memory import (
    fits,
    lora_params_per_layer,
    memory_per_gpu,
    nccl_bytes_per_communicator,
    nf4_bytes_per_param,
    state_bytes_per_param,
)

H100 = cluster("H100-SXM", nodes=1)
ONE_H100 = cluster("H100-SXM", gpus_per_node=1)
N_13B = 13_015_864_320  # Llama 2 13B, its released checkpoint


def _t(**kw) -> Training:
    return Training(global_batch_tokens=64 * 4096, seq=4096, **kw)


@pytest.mark.parametrize(
    ("precision", "optimizer", "expected"),
    [
        ("mixed", "adamw", 16),  # ZeRO paper: 2 + 2 + 12
        ("bf16", "adamw", 8),  # torchtune: bf16 weights, gradients, m, v
        ("mixed-bf16-moments", "adamw", 2 + 4 + 4 + 2 + 2),  # Megatron-Core: fp32 main grad and master, bf16 m, v
        ("mixed-bf16-state", "adamw", 2 + 2 + 2 + 2 + 2),  # Apex DistributedFusedAdam, dtype bf16 (NeMo 340B)
        ("mixed", "sgd", 2 + 2 + 4 + 4),  # one fp32 moment
        ("mixed", "adamw-8bit", 2 + 2 + 4 + 2 + 2 * 4 / 2048),  # two 1-byte moments, an fp32 absmax per 2048
        ("bf16", "adamw-8bit", 2 + 2 + 2 + 2 * 4 / 2048),
        ("mixed", "adamw-in-backward", 16),  # the state is AdamW's; the saving is in the gradients' lifetime
    ],
)
def test_bytes_per_parameter_by_precision_and_optimizer(precision, optimizer, expected):
    """Would catch a convention mistyped in memory_buffers.toml (a 4-byte moment in pure bf16, 8-bit moments that
    forget their block constants) or an optimizer that replaces the master weights instead of the moments."""
    assert sum(state_bytes_per_param(precision, optimizer).values()) == pytest.approx(expected, rel=1e-12)


def test_nf4_with_double_quantization_is_the_papers_bits():
    """QLoRA, Section 3: 4 bits plus 8/64 + 32/(64 x 256) = 0.127 bits of constants per parameter. Would catch a
    block size or a constant width mistyped (0.5 bits without double quantization)."""
    bits = nf4_bytes_per_param() * 8
    assert bits == pytest.approx(4 + 8 / 64 + 32 / (64 * 256), rel=1e-12)
    assert bits - 4 == pytest.approx(0.127, abs=5e-4)


def test_lora_adapters_of_llama2_13b_by_hand():
    """r (d_in + d_out) on q, k, v, o (5120 -> 5120 each: MHA) and gate, up, down (5120 <-> 13824), 40 layers.
    Would catch an adapter that forgets the MLP or counts r d_in d_out."""
    m, r = preset("13B"), 16
    per_layer = r * (4 * (5120 + 5120) + 3 * (5120 + 13824))
    assert lora_params_per_layer(m, r) == per_layer
    assert 40 * per_layer == 62_586_880  # 0.48 % of the 13B base


def test_qlora_13b_on_one_gpu_weights_are_nf4_plus_adapters():
    """The frozen base costs N x 4.127 / 8 bytes and no gradients or optimizer state; the adapters keep 16 B each
    (bf16 weights and gradients, fp32 master and moments). Would catch a base priced in bf16 or given gradients."""
    m = preset("13B")
    t = _t(task="finetune", peft="qlora")
    mem = memory_per_gpu(m, ONE_H100, t, Plan(micro_batch=1, microbatches=64, recompute="full"))
    adapters = 40 * lora_params_per_layer(m, 16)
    assert mem.weights == pytest.approx(N_13B * (4 + 8 / 64 + 32 / (64 * 256)) / 8 + 2 * adapters, rel=1e-9)
    assert mem.gradients == 2 * adapters and mem.optimizer == 12 * adapters
    assert fits(m, ONE_H100, t, Plan(micro_batch=1, microbatches=64, recompute="full"))


def test_nccl_buffers_are_the_documented_defaults():
    """Per connection NCCL_BUFFSIZE (4 MiB) + LL (8 x 512 x 8 x 16 B) + LL128 (120 x 640 x 8 x 8 B); 32 channels x 2
    connections. Would catch a buffer size in the wrong unit (MB for MiB) or a lost protocol."""
    per_connection = 4 * 2**20 + 8 * 512 * 8 * 16 + 120 * 640 * 8 * 8
    assert nccl_bytes_per_communicator() == 32 * 2 * per_connection


def test_peak_is_the_largest_phase_not_the_sum():
    """With full recomputation on one stage, the loss's logits (forward) and one layer's rebuilt activations
    (backward, later) are never alive together: the backward phase holds the larger. Would catch a return to
    summing every category (issue 34: large micro-batches over-predicted)."""
    m = preset("7B")
    mem = memory_per_gpu(m, H100, _t(), Plan(dp=8, micro_batch=4, microbatches=2, recompute="full"))
    assert mem.logits > 0 and mem.recompute_working > 0
    held = mem.weights + mem.optimizer + mem.gather_buffers + mem.gradients + mem.activations
    assert mem.allocator_peak_bytes == pytest.approx(
        held + max(mem.logits + mem.logits_backward, mem.recompute_working), rel=1e-12
    )
    everything = sum(v for k, v in mem.as_dict().items() if k not in ("communication buffers", "cuda context"))
    assert mem.allocator_peak_bytes < everything - mem.fragmentation
    assert mem.phases["optimizer_step"] < mem.phases["backward"]


def test_fit_is_reserved_plus_outside_within_capacity():
    """reserved + outside the allocator <= capacity is the same test as memory_bytes_per_gpu <= usable_bytes (the
    capacity less context and fragmentation). Would catch a category counted twice or left out of the fit."""
    m = preset("7B")
    for p in (Plan(dp=8, microbatches=8), Plan(dp=8, zero=3, micro_batch=8, microbatches=1)):
        mem = memory_per_gpu(m, H100, _t(), p)
        a = mem.reserved_bytes + mem.outside_allocator_bytes - device_capacity_bytes(H100.gpu)
        b = mem.device_bytes - usable_bytes(H100.gpu)
        assert a == pytest.approx(b, abs=1.0)


def test_stacks_buffers():
    """PyTorch DDP without gradient_as_bucket_view keeps a second copy of the gradients (PR 41954); DeepSpeed's ZeRO
    steps on an fp32 gradient partition (4 B per sharded parameter); foreach AdamW makes one sqrt(v) copy. Would
    catch a buffer charged to the wrong stack or the wrong state."""
    m = preset("1B")
    t = Training(global_batch_tokens=24 * 2048, seq=2048)
    ddp = memory_per_gpu(
        m,
        cluster("H100-SXM", gpus_per_node=3),
        Training(**{**t.__dict__, "framework": "fsdp2"}),
        Plan(dp=3, microbatches=8),
    )
    assert ddp.grad_buckets == ddp.gradients
    ds = memory_per_gpu(
        m,
        cluster("H100-SXM", gpus_per_node=3),
        Training(**{**t.__dict__, "framework": "deepspeed"}),
        Plan(dp=3, zero=1, microbatches=8),
    )
    assert ds.step_temporaries == 4 * math.ceil(m.params() / 3)
    tt = memory_per_gpu(
        m,
        cluster("H100-SXM", gpus_per_node=3),
        Training(**{**t.__dict__, "framework": "torchtitan"}),
        Plan(dp=3, zero=3, microbatches=8),
    )
    assert tt.step_temporaries == 4 * math.ceil(m.params() / 3)  # one fp32 moment-sized copy of the shard


def test_optimizer_in_backward_frees_gradients_and_refuses_accumulation():
    """torchtune's optimizer_in_bwd: one layer's gradients at a time, and no gradient accumulation. Would catch a
    plan that accumulates micro-batches with it, or gradients still counted whole."""
    m = preset("7B")
    t = _t(task="finetune", optimizer="adamw-in-backward", precision="bf16")
    one = Plan(dp=8, micro_batch=8, microbatches=1, recompute="full")
    mem = memory_per_gpu(m, H100, t, one)
    assert mem.gradients == 2 * m.params_per_layer()
    assert not fits(m, H100, t, Plan(dp=8, micro_batch=1, microbatches=8, recompute="full"))


@pytest.mark.parametrize("bad", [{"lora_rank": 0}, {"peft": "dora"}, {"optimizer": "adam9"}, {"precision": "fp9"}])
def test_bad_training_settings_are_refused(bad):
    """Would catch a rank-0 adapter or an unknown name reaching the cost model."""
    with pytest.raises(ValueError):
        _t(**bad)


def test_recompute_modules_free_what_megatron_core_reruns():
    """Megatron-Core's --recompute-modules: mlp frees the SwiGLU MLP's four s x b x ffn tensors (gate, SiLU output,
    up, the product), layernorm the two norms' outputs (2 x 2sbh); core_attn with FlashAttention only the log-sum-exp.
    Would catch a module that frees its input too, or a name that frees nothing."""
    from distlab.planner.memory import activation_bytes

    m, s = preset("7B"), 4096
    none = activation_bytes(m, _t(), Plan(dp=8, microbatches=8))
    sel = Plan(dp=8, microbatches=8, recompute="selective")
    mlp = activation_bytes(m, _t(recompute_modules=("mlp",)), sel)
    norms = activation_bytes(m, _t(recompute_modules=("layernorm",)), sel)
    assert none - mlp == 4 * 2 * s * m.ffn
    assert none - norms == 2 * 2 * s * m.hidden
    core = activation_bytes(m, _t(), sel)
    assert none - core == 4 * m.heads * s  # fp32 log-sum-exp per row and head
    with pytest.raises(ValueError):
        activation_bytes(m, _t(recompute_modules=("moe_act",)), sel)


def test_activation_offload_keeps_two_layers_and_prices_the_link():
    """Offloaded activations: two layers' worth stay on the device, the rest moves to the host, and the step pays
    what PCIe needs beyond the forward and the backward it hides under. Would catch offloaded bytes that vanish
    (neither device nor host) or a transfer that is never charged."""
    from distlab.planner.cost import activation_bytes, step

    m = preset("7B")
    p = Plan(dp=8, zero=3, micro_batch=4, microbatches=2)
    on, off = _t(activation_offload=True), _t()
    a, b = memory_per_gpu(m, H100, on, p), memory_per_gpu(m, H100, off, p)
    per_layer = activation_bytes(m, off, p)
    assert a.activations == 2 * per_layer
    assert a.activations + (a.host - b.host) == pytest.approx(b.activations, rel=1e-12)
    s_on, s_off = step(m, H100, on, p), step(m, H100, off, p)
    link = 32 * per_layer / H100.pcie.bandwidth_bytes_per_s
    expected = 2 * (max(0.0, link - s_off.forward_seconds) + max(0.0, link - s_off.backward_seconds))
    assert s_on.breakdown.offload - s_off.breakdown.offload == pytest.approx(expected, rel=1e-9)


def test_published_throughput_runs_fit_with_their_recompute_setting():
    """Every run of the throughput corpus fits the phase memory model with its published layout and recomputation,
    but one: torchtitan's Float8 + compile 8B row, whose notes do not say which selective policy it used (priced as
    Megatron's attention-core recompute, it needs more than the 96 GB device). Would catch a memory model that
    refuses layouts that ran (issue 34: 7 of the corpus's runs could not be expressed)."""
    from distlab.planner.corpus import runs
    from distlab.planner.planner_validation import corpus_errors

    refused = sorted(set(runs()) - set(corpus_errors()))
    assert refused == ["tt-llama31-8b-h100-8-fsdp-compile-fp8"]


def test_interleaved_schedule_holds_megatrons_warm_up_on_every_stage():
    """Megatron-Core's interleaved 1F1B runs 2 (p - s - 1) + (v - 1) p chunk forwards before its first backward, so
    stage 0 holds p + (p - 1)/v stage-loads of activations (Korthikanti et al. 2022) and the last stage nearly p, not
    1 + (p - 1)/v. Would catch the last stage's activations (beside the logits) priced as 1F1B's single micro-batch."""
    from distlab.planner.memory import in_flight

    p, v = 8, 12
    plan = Plan(tp=8, pp=p, dp=2, virtual=v, schedule="interleaved", microbatches=16)
    assert in_flight(plan, 0) == pytest.approx(p * (1 + (p - 1) / (p * v)), rel=1e-12)
    assert in_flight(plan, p - 1) == pytest.approx((0 + (v - 1) * p + 1) / v, rel=1e-12)  # 89 chunks of 1/12
    few = Plan(tp=8, pp=p, dp=2, virtual=v, schedule="interleaved", microbatches=p)
    assert in_flight(few, 0) == p  # m = p: every chunk forward is warm-up, never more than the m micro-batches


NEMOTRON_340B = ModelShape(  # NVIDIA/dgxc-benchmarking nemotron4-340b-synth.yaml: squared ReLU, two matrices, no bias
    name="Nemotron-4 340B",
    layers=96,
    hidden=18432,
    heads=96,
    kv_heads=8,
    ffn=73728,
    vocab=256000,
    mlp="gelu",
    dropout=False,
)


def test_nemotron_340b_recipe_fits_128_h100s_with_its_bf16_optimizer_state():
    """NVIDIA's Nemotron-4 340B benchmark ran on 128 H100s (TP 8, PP 8, DP 2, interleaved v = 12, micro-batch 1,
    GBS 32, selective recompute, 4.61 s per step) with Apex's DistributedFusedAdam at dtype bf16: its parameter copy
    and moments in bf16, the gradient buffer in bf16 (10 B per parameter, 7 B at DP 2). Priced with an fp32 state
    (16 B, 10 B at DP 2) it does not fit: the issue's refusal. Would catch the optimizer dtype ignored again, or the
    layout refused for another reason."""
    c = cluster("H100-SXM", nodes=16)
    plan = Plan(
        tp=8,
        pp=8,
        dp=2,
        zero=1,
        micro_batch=1,
        microbatches=16,
        recompute="selective",
        schedule="interleaved",
        virtual=12,
    )
    run = dict(global_batch_tokens=32 * 4096, seq=4096, framework="megatron-core")
    ran = Training(**run, precision="mixed-bf16-state")
    assert fits(NEMOTRON_340B, c, ran, plan)
    assert not fits(NEMOTRON_340B, c, Training(**run), plan)
    mem = memory_per_gpu(NEMOTRON_340B, c, ran, plan)
    local = (12 * NEMOTRON_340B.params_per_layer() + 256000 * 18432 + 4096 * 18432) / 8  # stage 0 / TP
    assert mem.model_states == pytest.approx(local * (2 + 2 + 6 / 2), rel=1e-3)


def test_stack_buffers_at_their_documented_defaults():
    """DeepSpeed ZeRO-3 keeps up to stage3_max_live_parameters (1e9) resident plus a stage3_prefetch_bucket_size
    (5e8) buffer of bf16 weights and a reduce_bucket_size (5e8) gradient bucket; FSDP with reshard_after_forward off
    keeps the whole local model gathered; torchtune's chunked loss keeps 2 B per logit after forward and adds only
    one chunk's gradient (2 B / 8 chunks) at its backward, each chunk's gradient replacing its freed logits. Would
    catch a default mistyped in memory_buffers.toml or a flag that changes nothing."""
    m = preset("7B")
    p = Plan(dp=8, zero=3, micro_batch=1, microbatches=8)
    ds = memory_per_gpu(m, H100, _t(framework="deepspeed"), p)
    assert ds.gather_buffers == 2 * (1e9 + 5e8)
    assert ds.grad_buckets == 2 * 5e8
    kept = memory_per_gpu(m, H100, _t(framework="fsdp2", reshard_after_forward=False), p)
    assert kept.gather_buffers == 2 * m.params()
    assert memory_per_gpu(m, H100, _t(framework="fsdp2"), p).gather_buffers == 2 * 2 * m.params_per_layer()
    one = Plan(dp=8, zero=3, micro_batch=1, microbatches=8)
    chunked = memory_per_gpu(m, H100, _t(framework="fsdp2", loss="chunked"), one)
    logits = 4096 * m.vocab
    assert chunked.logits == 2 * logits and chunked.logits_backward == pytest.approx(2 / 8 * logits, rel=1e-12)
    with pytest.raises(ValueError):
        _t(loss="liger")


def test_ddp_under_autocast_keeps_the_bf16_weight_casts_through_backward():
    """Plain PyTorch DDP (fp32 weights, torch.autocast): 2 B per parameter of cached bf16 casts in forward and
    backward, none at the optimizer step, none for Megatron-Core (bf16 weights, no autocast). Would catch the cast
    cache forgotten (a DDP 7B under-predicted by 13 GB) or charged at the step."""
    m = preset("7B")
    p = Plan(dp=8, zero=0, micro_batch=1, microbatches=8, recompute="full")
    ddp = memory_per_gpu(m, H100, _t(framework="fsdp2"), p)
    assert ddp.autocast_cache == 2 * m.params()
    base = memory_per_gpu(m, H100, _t(framework="megatron-core"), p)
    assert base.autocast_cache == 0
    assert ddp.phases["optimizer_step"] - ddp.step_temporaries - ddp.grad_buckets == pytest.approx(
        ddp.weights + ddp.optimizer + ddp.gradients, rel=1e-12
    )
