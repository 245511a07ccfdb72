"""The memory corpus (torchtitan's printed max_memory_reserved) against the planner's phase model, and the cause the
corpus exposed: FSDP2 under a pipeline accumulates unsharded gradients in fp32. References: the printed GiB in
distlab/data/memory_corpus.toml, and 4 bytes per local parameter counted by hand."""

import math
from dataclasses import replace

import pytest

from distlab.models.shapes import catalog
from distlab.planner.config import Plan, Training, cluster
from distlab.planner.memory import memory_per_gpu
from distlab.planner.memory_corpus import errors, float8_gather_switch_bytes, rows, shape, training
from distlab.planner.stages import stage_params


def test_fsdp_rows_of_the_8b_benchmark_are_within_ten_percent():
    """torchtitan's 8B FSDP rows on 8 and 128 GPUs (eager, compile, Float8) within 10 % of the printed reserved
    peak. Would catch a phase summed that is not alive at the peak (an over-count), or the loss's logits dropped."""
    errs = errors()
    for key in ("tt2412-t1-fsdp", "tt2412-t1-fsdp-compile", "tt2412-t3-fsdp", "tt2412-t3-fsdp-compile-fp8"):
        assert abs(errs[key]) <= 0.10, (key, errs[key])
    torchtitan = [k for k, r in rows().items() if r["source"] == "torchtitan-2412"]
    assert len(torchtitan) == 18 and len([k for k in errs if k in torchtitan]) == 17  # interleaved: chunks not printed


def test_fsdp2_under_a_pipeline_accumulates_gradients_in_fp32():
    """With PP, FSDP2's gradient sync is off until the last micro-batch and the unsharded gradients accumulate in the
    reduce dtype (fp32 in torchtitan): 4 B per local parameter, against 2 B in bf16 for the same plan outside
    torchtitan. Would catch the bf16 accumulation the model used before (405B rows under-predicted by a third)."""
    m = catalog()["Llama-3-405B"]
    c = cluster("H100-SXM", nodes=64)
    plan = Plan(dp=8, tp=8, pp=8, zero=3, micro_batch=1, microbatches=8, recompute="full")
    tt = Training(global_batch_tokens=64 * 8192, seq=8192, framework="torchtitan")
    local = math.ceil(stage_params(m, 8)[0] / 8)
    assert memory_per_gpu(m, c, tt, plan).gradients == pytest.approx(4 * local, rel=1e-12)
    mc = Training(global_batch_tokens=64 * 8192, seq=8192, framework="megatron-core")
    assert memory_per_gpu(m, c, mc, plan).gradients == pytest.approx(2 * local, rel=1e-12)


def test_the_corpus_has_rows_from_four_sources():
    """torchtune's Llama 3.2 3B table (9 packed rows), LitGPT's Llama 2 LoRA table (5 rows) and torchao's float8
    benchmark (3 rows) beside torchtitan's. Would catch a row dropped, or a GB figure converted to GiB with the wrong
    unit (LitGPT prints 1e9 B)."""
    by_source = {}
    for row in rows().values():
        by_source.setdefault(row["source"], []).append(row)
    assert len(by_source["torchtune-readme-2411"]) == 9 and len(by_source["litgpt-resource-tables"]) == 5
    assert len(by_source["torchao-float8-2503"]) == 3 and len(by_source) == 4
    for row in by_source["litgpt-resource-tables"]:
        printed, unit = row["published_peak_memory"].split()
        assert unit == "GB" and row["published_peak_memory_gib"] == pytest.approx(
            float(printed) * 1e9 / 2**30, abs=5e-4
        )


def test_litgpt_lora_rows_are_within_ten_percent_and_count_bf16_weights():
    """LitGPT's bf16-true LoRA runs (Llama 2 7B and 13B, 1304-token longest sample) within 10 % of the printed
    max_memory_allocated. Would catch the frozen base priced in fp32 (twice the weights) or the activations dropped
    for a frozen base."""
    errs = errors()
    for key in ("litgpt2310-7b-lora-mb1", "litgpt2310-7b-lora-mb2", "litgpt2310-13b-lora-mb1"):
        assert abs(errs[key]) <= 0.10, (key, errs[key])


def test_torchao_rows_one_sequence_per_gpu_are_within_ten_percent():
    """torchao's float8 benchmark runs torchtitan's Llama 3 8B at one sequence of 8192 per GPU (FSDP 8, per-op SAC,
    compile): half torchtitan's own two-sequence rows' activations and logits. Within 10 % of the printed reserved
    peak; would catch the logits or activations not scaling with the local batch."""
    errs = errors()
    for key in ("torchao2503-8b-bf16", "torchao2503-8b-tensorwise", "torchao2503-8b-rowwise"):
        assert abs(errs[key]) <= 0.10, (key, errs[key])


def test_torchtune_single_gpu_rows_price_backward_moments_apart():
    """torchtune's compiled Llama 3.2 3B rows (chunked loss, recomputation, optimizer in backward, offload, 8-bit
    AdamW) within 10 % of the printed peak active bytes. Would catch backward's moments summed again: every weight
    gradient added to the loss's backward put these rows 15-30 % over."""
    errs = errors()
    for tag in ("compile", "chunked-ce", "ac", "opt-in-bwd", "offload", "adamw8bit"):
        key = f"ttune2411-3b-{tag}"
        assert abs(errs[key]) <= 0.10, (key, errs[key])


def test_torchtitan_tp_and_pp_buffers_counted_from_the_code_that_ran():
    """torchtitan's 2D rows price DTensor's loss_parallel (four fp32 copies of the local logits at its backward, not
    plain cross_entropy's three) and the output projection's all-gathered input; its pipeline rows split the local
    batch into PP-degree micro-batches (its default) and keep every micro-batch's stage output and receive buffer.
    Hand counts from the printed layout. Would catch loss_parallel priced as the eager loss (the 70B rows 27 % under),
    or one sequence per micro-batch (the 405B 1F1B row priced with a quarter of its activations)."""
    m = catalog()["Llama-3-70B"]
    c = cluster("H100-SXM", nodes=32)
    plan = Plan(dp=32, tp=8, zero=3, micro_batch=16, microbatches=1, recompute="full")
    tt = Training(global_batch_tokens=512 * 8192, seq=8192, framework="torchtitan")
    mem = memory_per_gpu(m, c, tt, plan)
    logits = 16 * 8192 * m.vocab / 8
    assert mem.logits + mem.logits_backward == pytest.approx(16 * logits, rel=1e-12)
    assert mem.head_input == pytest.approx(2 * 16 * 8192 * m.hidden + 6 * 16 * 1024 * m.hidden, rel=1e-12)
    fsdp2 = Training(global_batch_tokens=512 * 8192, seq=8192, framework="fsdp2")
    assert memory_per_gpu(m, c, fsdp2, plan).head_input == 0.0
    errs = errors()
    for key in ("tt2412-t4-2d-asynctp", "tt2412-t2-cp1", "tt2412-t2-cp2", "tt2412-t2-cp4", "tt2412-t6-cp1"):
        assert abs(errs[key]) <= 0.10, (key, errs[key])
    big = catalog()["Llama-3-405B"]
    pp_plan = Plan(dp=8, tp=8, pp=8, zero=3, micro_batch=4, microbatches=8, recompute="full")
    pp_mem = memory_per_gpu(big, cluster("H100-SXM", nodes=64), tt, pp_plan)
    assert pp_mem.pipeline_buffers == pytest.approx(8 * 2 * 4 * 1024 * big.hidden * 2, rel=1e-12)


def test_litgpt_lora_and_qlora_saved_tensors_counted_op_by_op():
    """Lit-GPT 8641822's LoRA (q, v, dropout 0.05) and QLoRA, Llama 2 13B (hidden 5120, 40 heads, ffn 13824) at 1304
    tokens: a hand count per token and layer from its code. Would catch QLoRA priced with LoRA's saved tensors (the
    rows 23 % under: bitsandbytes keeps every linear's input), or the frozen base's inputs counted as saved."""
    from distlab.planner.memory import dequantized_head_bytes, litgpt_lora_saved_bytes

    m = catalog()["13B"]
    h, f = 5120, 13824
    plan = Plan(dp=1, micro_batch=1, recompute="none")
    lora = Training(global_batch_tokens=1304, seq=1304, peft="lora", lora_rank=8, peft_code="litgpt")
    # norms 4h, q 2h, k 2h, qkv 6h, O 2h, lse 4 x 40, mask h, dropout output 2h, zero_pad source 4h, MLP 6f
    per_token = 4 * h + 2 * h + 2 * h + 6 * h + 2 * h + 160 + h + 2 * h + 4 * h + 6 * f
    assert litgpt_lora_saved_bytes(m, lora, plan) == pytest.approx(per_token * 1304, rel=1e-12)
    qlora = Training(global_batch_tokens=1304, seq=1304, peft="qlora", lora_rank=8, peft_code="litgpt")
    extra = (2 * h + 2 * h + 2 * f) * 1304
    assert litgpt_lora_saved_bytes(m, qlora, plan) - litgpt_lora_saved_bytes(m, lora, plan) == pytest.approx(extra)
    assert dequantized_head_bytes(m, qlora) == 4 * 32000 * h
    generic = Training(global_batch_tokens=1304, seq=1304, peft="qlora", lora_rank=8)
    assert dequantized_head_bytes(m, generic) == 0.0
    with pytest.raises(ValueError, match="peft_code"):
        Training(global_batch_tokens=1304, seq=1304, peft="lora", peft_code="hf")
    errs = errors()
    for key in (k for k in errs if k.startswith("litgpt")):
        assert abs(errs[key]) <= 0.10, (key, errs[key])


def test_eager_rmsnorm_upcast_keeps_fp32_copy():
    """torchtune's RMSNorm run eagerly keeps x.float() (4 B) and, with a trained scale, x_normed (2 B) per token and
    hidden unit, instead of the bf16 input (2 B) chapter 3 counts; a frozen scale (LoRA) keeps only the fp32 copy.
    Llama 3.2 3B (hidden 3072, 28 layers), 2 x 4096 tokens. Would catch the upcast counted when the layers are
    compiled, or counted again under recomputation (where the norm is rebuilt in backward)."""
    from dataclasses import replace

    from distlab.planner.memory import activation_bytes, rmsnorm_upcast_extra_bytes

    row = rows()["ttune2411-3b-packed"]
    m, t = shape(row), training(row)
    assert t.rmsnorm_upcast and not training(rows()["ttune2411-3b-compile"]).rmsnorm_upcast
    plan = Plan(dp=1, micro_batch=2, recompute="none")
    assert rmsnorm_upcast_extra_bytes(m, t, plan) == pytest.approx(2 * 4 * 2 * 4096 * 3072, rel=1e-12)
    lora = replace(t, peft="lora")
    assert rmsnorm_upcast_extra_bytes(m, lora, plan) == pytest.approx(2 * 2 * 2 * 4096 * 3072, rel=1e-12)
    c = cluster("A100-SXM-80GB", nodes=1)
    full = Plan(dp=1, micro_batch=2, recompute="full")
    assert memory_per_gpu(m, c, t, full).activations == pytest.approx(
        memory_per_gpu(m, c, replace(t, rmsnorm_upcast=False), full).activations
    )
    assert memory_per_gpu(m, c, t, plan).activations == pytest.approx(
        28 * (activation_bytes(m, t, plan) + 2 * 4 * 2 * 4096 * 3072)
    )
    assert abs(errors()["ttune2411-3b-packed"]) <= 0.10


def test_ring_attention_holds_the_whole_kv_and_fp32_accumulators_in_one_layer_backward():
    """torch's context_parallel under torchtitan, counted by hand at awkward sizes (Llama 3 8B: 32 heads, 8 KV heads,
    head dim 128; TP 2, CP 4, 2 sequences of 12,000 tokens): the all-gathered K and V of all 4 ranks plus the local
    copy sent, fp32 dq, dk, dv, one ring step's bf16 gradients and the fp32 dk, dv sent and received; nothing without
    CP or outside torchtitan; counted in the layer's backward only. Would catch K and V gathered per rank instead of
    whole, the accumulators priced in bf16 (convert_to_f32 is on), or the working set added to the loss's backward."""
    m = catalog()["Llama-3-8B"]
    c = cluster("H100-SXM", nodes=1)
    plan = Plan(dp=1, tp=2, cp=4, zero=3, micro_batch=2, microbatches=1, recompute="full")
    tt = Training(global_batch_tokens=2 * 12000, seq=12000, framework="torchtitan")
    mem = memory_per_gpu(m, c, tt, plan)
    tokens = 2 * 3000
    q, kv = tokens * 16 * 128, tokens * 4 * 128
    hand = 2 * (4 * 2 * kv) + 2 * (2 * kv) + 4 * (q + 2 * kv) + 2 * (q + 2 * kv) + 4 * (2 * 2 * kv)
    assert mem.ring_attention == pytest.approx(hand, rel=1e-12)
    without = replace(mem, ring_attention=0.0)
    assert mem.backward_start == without.backward_start and mem.backward_end == without.backward_end
    assert mem.backward_layer == pytest.approx(without.backward_layer + hand, rel=1e-12)
    assert memory_per_gpu(m, c, replace(tt, framework="megatron-core"), plan).ring_attention == 0.0
    assert memory_per_gpu(m, c, tt, replace(plan, cp=1)).ring_attention == 0.0


def test_float8_gather_switch_is_one_byte_per_linear_weight_of_the_stage():
    """What FSDP 1 switches off in torchtitan (float8 all-gather) for the 405B CP 8 row: 1 B per local weight of the
    first stage's 16 layers' q, k, v, o and three SwiGLU matrices over TP 8, counted by hand. Would catch the
    switch priced over the whole model instead of the stage, or the embedding counted (it is not a float8 linear)."""
    row = rows()["tt2412-t6-cp8"]
    per_layer = 16384 * 16384 + 2 * 16384 * 1024 + 16384 * 16384 + 3 * 16384 * 53248
    assert float8_gather_switch_bytes(row) == pytest.approx(16 * per_layer / 8, rel=1e-12)
