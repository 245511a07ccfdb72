"""The planner's cost model (distlab.planner.cost, kernels, comms) against references typed here: ZeRO's 16 bytes
per parameter and the fp32-gradient conventions, an H100's reported capacity, Narayanan et al.'s FLOP count, the
GEMM wave rule worked by hand, NCCL's per-step latency counted collective by collective, the pipeline's (p-1)/m,
and small layouts whose step is worked out by hand."""

import math

import pytest

from distlab.gpu.flops import mfu
from distlab.models.shapes import ModelShape, preset
from distlab.planner import comms
from distlab.planner.config import Plan, Training, cluster, usable_bytes
from distlab.planner.cost import data_parallel_exposed, memory_per_gpu, stage_time, step
from distlab.planner.kernels import TILE_M, TILE_N, gemm_seconds, matmul_fraction, training_share, wave_efficiency

H100 = cluster("H100-SXM", nodes=1)
N_7B = 6_738_415_616  # Llama 2 7B, its released checkpoint


def test_model_states_by_convention():
    """ZeRO paper, Section 3.1: 2 + 2 + 12 bytes per parameter unsharded (the default, `mixed`); Megatron's fp32
    main_grad 18, fp32 accumulation 20; ZeRO-3 shards all of it over N (padded up). Would catch a convention
    that does not reach the planner, or a stage that shards the wrong state."""
    m = preset("7B")
    for precision, per in (("mixed", 16), ("mixed-fp32-grads", 18), ("mixed-fp32-accum", 20)):
        t = Training(global_batch_tokens=64 * 4096, seq=4096, precision=precision)
        assert memory_per_gpu(m, H100, t, Plan(dp=8, microbatches=8)).model_states == per * N_7B
    t = Training(global_batch_tokens=64 * 4096, seq=4096)
    z3 = memory_per_gpu(m, H100, t, Plan(dp=8, zero=3, microbatches=8))
    assert z3.model_states == 16 * math.ceil(N_7B / 8)
    assert z3.gather_buffers > 0 and memory_per_gpu(m, H100, t, Plan(dp=8, microbatches=8)).gather_buffers == 0


def test_usable_memory_is_the_reported_capacity_less_the_reserve():
    """An H100 reports 81,559 MiB (nvidia-smi), an A100 81,920 MiB; less the 723 MiB CUDA context and 5 %
    fragmentation. Would catch a return to 90 % of the datasheet's 80e9 bytes (72 GB)."""
    for chip, mib in (("H100-SXM", 81559), ("A100-SXM-80GB", 81920)):
        expected = 0.95 * mib * 2**20 - 723 * 2**20
        assert usable_bytes(cluster(chip).gpu) == pytest.approx(expected, rel=1e-12)
    assert usable_bytes(H100.gpu) > 80e9


def test_zero3_with_a_pipeline_needs_zero1s_memory():
    """torchtitan's FSDP + PP gathers each stage's weights once per step and keeps them, and accumulates the
    gradients unsharded: its model state is ZeRO-1's, plus the gather buffers. Would catch ZeRO-3 + PP counted
    with sharded gradients (it then looked leaner than it is and won searches with offload)."""
    m = preset("13B")
    c = cluster("H100-SXM", nodes=2)
    t = Training(global_batch_tokens=64 * 4096, seq=4096)
    z1 = memory_per_gpu(m, c, t, Plan(tp=2, pp=2, dp=4, zero=1, microbatches=16))
    z3 = memory_per_gpu(m, c, t, Plan(tp=2, pp=2, dp=4, zero=3, microbatches=16))
    assert (z3.weights, z3.gradients, z3.optimizer) == (z1.weights, z1.gradients, z1.optimizer)
    with pytest.raises(ValueError, match="no pipeline"):
        Plan(tp=2, pp=2, dp=4, zero=3, microbatches=16, offload="params")


def test_activations_count_the_micro_batches_1f1b_holds():
    """Stage 0 of 1F1B holds p micro-batches of its layers (Narayanan et al. 2021, Section 2.2): with 8 layers on
    4 stages and 16 micro-batches, stage 0 keeps 4 x 2 layers' activations, as many as all 8 layers of one
    micro-batch. Awkward shape: hidden 1000, 10 heads, sequence 1000."""
    m = ModelShape(layers=8, hidden=1000, heads=10, ffn=4000, vocab=5000, seq=1000, mlp="gelu")
    c = cluster("H100-SXM", nodes=1)
    t = Training(global_batch_tokens=32 * 1000, seq=1000)
    piped = memory_per_gpu(m, c, t, Plan(pp=4, dp=2, micro_batch=1, microbatches=16))
    flat = memory_per_gpu(m, c, t, Plan(pp=1, dp=8, micro_batch=1, microbatches=4))
    assert piped.activations == pytest.approx(flat.activations, rel=1e-12)
    assert flat.logits == 1000 * 1 * 5000 * 4  # fp32 logits of one micro-batch


def megatron_1t():
    m = ModelShape(
        layers=128, hidden=25600, heads=160, ffn=4 * 25600, vocab=51200, seq=2048, mlp="gelu", tie_embeddings=True
    )
    t = Training(global_batch_tokens=3072 * 2048, seq=2048, attention="standard", dropout=True, sequence_parallel=False)
    return m, t


def test_hardware_flops_equal_narayanan_formula():
    """Narayanan et al. 2021, Section 5.1: with full recomputation one iteration of B sequences executes
    96 B s l h^2 (1 + s/(6h) + V/(16 l h)) FLOPs. The planner's hardware FLOPs for their 1T run must count that,
    up to the biases and norms the formula leaves out (under 0.1 %). Would catch a missing recompute pass, a
    forgotten head or attention counted twice."""
    m, t = megatron_1t()
    c = cluster("A100-SXM-80GB", nodes=384, inter=25)
    p = Plan(tp=8, pp=64, dp=6, micro_batch=1, microbatches=512, recompute="full")
    e = step(m, c, t, p, exact_pipeline=False)
    B, s, L, h, V = 3072, 2048, 128, 25600, 51200  # the paper's symbols
    assert e.hardware_flops == pytest.approx(96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h)), rel=1e-3)
    assert e.hfu == pytest.approx(e.mfu * e.hardware_flops / e.model_flops, rel=1e-12)


def test_gemm_waves_by_hand():
    """A 4096 x 1280 output (TP 8's share of Llama 2 70B's QKV) is 32 x 5 = 160 tiles of 128 x 256 on 132 SMs:
    two waves, 160/264 of the chip busy; its time is 2mnk FLOPs at the sustained rate (744.8 TFLOP/s measured on
    Hopper) over that share, and in a training step at the fitted training share of that rate. Would catch the
    wave loss at high TP dropping out, the burst MAMF (848.4) used where the sustained rate is meant, or the
    training share applied twice or not at all."""
    chip = H100.gpu
    assert (TILE_M, TILE_N, chip.sms) == (128, 256, 132)
    assert wave_efficiency(4096, 1280, 132) == pytest.approx(160 / 264, rel=1e-12)
    assert matmul_fraction(chip) * chip.peak_flops("bf16") == pytest.approx(744.8e12, rel=1e-12)
    expected = 2 * 4096 * 1280 * 8192 / (744.8e12 * 160 / 264)
    assert gemm_seconds(chip, 4096, 1280, 8192, share=1.0) == pytest.approx(expected, rel=1e-12)
    share = training_share()
    assert 0.6 < share < 1.0  # a share of the benchmark, fitted (chapter 13)
    assert gemm_seconds(chip, 4096, 1280, 8192) == pytest.approx(expected / share, rel=1e-12)
    # a skinny GEMM is memory-bound: 1 x 8192 @ 8192 x 8192 moves 2 x 8192^2 bytes of weights at 80 % of 3.35 TB/s
    assert gemm_seconds(chip, 1, 8192, 8192) == pytest.approx(
        (2 * (8192 + 8192 * 8192) + 2 * 8192) / (chip.hbm_bytes_per_s * 0.8), rel=1e-12
    )


def test_zero3_pays_one_latency_per_collective_per_layer_per_micro_batch():
    """FSDP's per-layer collectives: forward all-gather, backward all-gather and reduce-scatter, every layer,
    every micro-batch, each paying its latency. On a model whose bytes are negligible (hidden 16, 3 layers) the
    ZeRO-3 traffic on 2 nodes is n x (3 L + 3) collectives' latencies (the embedding and head's gather, backward
    gather and scatter add three), which NCCL's LL latency for a 2-rank ring across nodes gives. Would catch
    latency paid once per whole-model collective (the old model's flat ZeRO-3)."""
    from distlab.hardware.collectives import protocol_latency_s

    m = ModelShape(layers=3, hidden=16, heads=2, ffn=64, vocab=32, seq=64, mlp="gelu")
    c = cluster("H100-SXM", gpus_per_node=1, nodes=2)
    t = Training(global_batch_tokens=2 * 4 * 64, seq=64)
    p = Plan(dp=2, zero=3, micro_batch=1, microbatches=4)
    st = stage_time(m, c, t, p, 3, first=True, last=True)
    _, total = data_parallel_exposed(m, c, t, p, st, 3)
    ll = protocol_latency_s("all-gather", 2, 2, "ll")  # all-gather and reduce-scatter: 1 step, across the nodes
    assert total == pytest.approx(4 * (3 * 3 + 3) * ll, rel=0.05)  # the bytes add under 5 %


def test_one_ring_per_nic_and_the_one_nic_node():
    """A data-parallel group of 8 GPUs per node over 8 nodes runs 8 rings, one per NIC: bus bandwidth 8 x 50 GB/s
    (InfiniBand NDR); a node with one NIC for its 8 GPUs gives the same group 50 GB/s; a group with one GPU per
    node (TP 8 inside) gets its own NIC, 50 GB/s. Would catch node egress charged as one port, or as eight ports
    shared by a group that uses one."""
    c8 = cluster("H100-SXM", nodes=8)
    c1 = cluster("H100-SXM", nodes=8, nics_per_node=1)
    assert comms.group(c8, 64, 1).bus_bytes_per_s == pytest.approx(400e9, rel=1e-12)
    assert comms.group(c1, 64, 1).bus_bytes_per_s == pytest.approx(50e9, rel=1e-12)
    assert comms.group(c8, 8, 8).bus_bytes_per_s == pytest.approx(50e9, rel=1e-12)
    assert comms.group(c8, 8, 1).nodes == 1  # eight ranks of one node stay on NVLink


def test_tp_overlap_hides_t_minus_1_over_t_of_each_gemm():
    """With overlap a TP collective hides behind (t-1)/t of the GEMM next to it, and what it hides still takes
    NCCL's 32 SMs of 132 from that GEMM; without overlap all of it shows. For Llama 2 70B at TP 8 on one
    H100 node: exposed(on) = sum over the collectives of max(0, comm - 7/8 gemm) + 32/132 min(comm, 7/8 gemm).
    Would catch overlap modelled as free, or as nothing."""
    from dataclasses import replace

    m = preset("70B")
    t = Training(global_batch_tokens=8 * 4096, seq=4096, tp_overlap=True)  # overlap is opt-in (issue 25)
    p = Plan(tp=8, dp=1, micro_batch=1, microbatches=8)
    on = stage_time(m, H100, t, p, 1, first=False, last=False)
    off = stage_time(m, H100, replace(t, tp_overlap=False), p, 1, first=False, last=False)
    assert off.exposed_tp == pytest.approx(off.traffic["tp"], rel=1e-12)  # forward + backward: all of it
    assert 0 < on.exposed_tp < 0.5 * off.exposed_tp
    assert on.compute == off.compute


def test_pipeline_bubble_from_simulator_matches_closed_form():
    """1F1B idles (p-1)(F + B) (Narayanan et al. 2021, Section 2.2), between the faster and the slower stage's
    F + B when they differ; the simulated pipeline adds the point-to-point sends, at most two per slot of the
    critical path's m + p - 1."""
    m = preset("13B")
    c = cluster("H100-SXM", nodes=2)
    t = Training(global_batch_tokens=32 * 4096, seq=4096)
    p = Plan(tp=8, pp=2, dp=1, micro_batch=1, microbatches=32)
    e = step(m, c, t, p)
    first = stage_time(m, c, t, p, 20, first=True, last=False)
    last = stage_time(m, c, t, p, 20, first=False, last=True)
    fb = sorted(s.forward + s.backward for s in (first, last))  # the stages differ: embedding or head
    assert fb[0] <= e.breakdown.bubble <= fb[1] + 2 * (32 + 2 - 1) * e.p2p_seconds  # (p - 1)(F + B), p = 2
    assert e.p2p_seconds > 0


def test_zb_h1_and_interleaved_beat_1f1b_on_the_bubble():
    """ZB-H1 idles (p-1)(F + B - W) against 1F1B's (p-1)(F + B), interleaving v chunks divides the bubble by v
    (Qi et al. 2023; Narayanan et al. 2021): both smaller. Would catch the planner timing every schedule as 1F1B."""
    m = preset("13B")
    c = cluster("H100-SXM", nodes=2)
    t = Training(global_batch_tokens=16 * 4096, seq=4096)
    bubble = {}
    for schedule, v in (("1f1b", 1), ("zb-h1", 1), ("interleaved", 2)):
        p = Plan(tp=8, pp=2, dp=1, micro_batch=1, microbatches=16, schedule=schedule, virtual=v)
        bubble[schedule] = step(m, c, t, p).breakdown.bubble
    assert bubble["zb-h1"] < 0.75 * bubble["1f1b"] and bubble["interleaved"] < 0.75 * bubble["1f1b"]


def test_offload_is_charged_per_micro_step():
    """ZeRO-Offload sends the gradient shard down PCIe every micro-step: 16 micro-batches of a 7B fine-tune on one
    GPU (ZeRO-1, offloaded) move 16 x 2 bytes x N down, at least 16 x 2N / 64 GB/s in all (PCIe 5 x16, each way)
    unless backward hides it. Would catch offload charged once per step."""
    m = preset("7B")
    c = cluster("H100-SXM", gpus_per_node=1)
    t = Training(global_batch_tokens=16 * 4096, seq=4096)
    one = step(m, c, t, Plan(dp=1, zero=1, offload="optimizer", micro_batch=1, microbatches=16)).breakdown.offload
    assert one >= N_7B * 2 / c.pcie.bandwidth_bytes_per_s  # the parameters come back once per step at least
    assert c.pcie.bandwidth_bytes_per_s == pytest.approx(64e9 * 128 / 130, rel=1e-3)


def test_mfu_is_chapter_2s_definition():
    """MFU = tokens/s x (6N + 12Lhs) / (GPUs x dense peak) (gpu.flops.mfu); tokens/s x step = batch; the step's
    causes add up to it; TFLOP/s per GPU = MFU x 989."""
    m = preset("7B")
    t = Training(global_batch_tokens=64 * 4096, seq=4096)
    e = step(m, H100, t, Plan(dp=8, zero=3, microbatches=8))
    per_token = 6 * N_7B + 12 * m.layers * m.hidden * 4096
    assert e.mfu == pytest.approx(mfu(e.tokens_per_second, per_token, 8, 989e12), rel=1e-12)
    assert e.tokens_per_second * e.seconds == pytest.approx(64 * 4096, rel=1e-12)
    assert sum(e.breakdown.as_dict().values()) == pytest.approx(e.seconds, rel=1e-12)
    assert e.tflops_per_gpu == pytest.approx(e.mfu * 989, rel=1e-9)


def test_single_gpu_step_by_hand():
    """A small layout worked by hand: one H100, one micro-batch, no parallelism. Nothing but compute and the
    optimizer: no communication, bubble or offload; the compute at least 6 x (matmul parameters) x tokens at the
    sustained 744.8 TFLOP/s; the optimizer AdamW's 28 bytes per parameter at 80 % of HBM bandwidth. Would catch
    phantom communication on a single GPU, or an optimizer pass over the wrong bytes."""
    m = ModelShape(layers=4, hidden=1024, heads=8, ffn=4096, vocab=32000, seq=1024, mlp="gelu")
    c = cluster("H100-SXM", gpus_per_node=1)
    t = Training(global_batch_tokens=1024, seq=1024)
    e = step(m, c, t, Plan(dp=1, micro_batch=1, microbatches=1))
    b = e.breakdown
    assert b.exposed_tp == b.exposed_dp == b.exposed_cp_ep == b.bubble == b.offload == 0
    matmul_params = 4 * (4 * 1024 * 1024 + 2 * 1024 * 4096) + 32000 * 1024  # blocks and the head
    assert b.compute >= 6 * matmul_params * 1024 / (744.8e12)
    # AdamW in mixed precision touches 2 + 2 x 12 + 2 bytes per parameter at 80 % of HBM bandwidth
    assert b.optimizer == pytest.approx(m.params() * 28 / (c.gpu.hbm_bytes_per_s * 0.8), rel=1e-9)


def test_zero2_pays_one_gather_and_one_scatter_per_layer_per_micro_batch():
    """FSDP's SHARD_GRAD_OP keeps a layer's gathered weights from its forward to its backward: per layer and
    micro-batch one all-gather and one reduce-scatter, each with its latency, and no backward gather. On the tiny
    model of the ZeRO-3 test that is n x (2 L + 2) latencies. Would catch ZeRO-2 priced as one whole-model
    collective per step (DeepSpeed's buckets) or with ZeRO-3's second gather."""
    from distlab.hardware.collectives import protocol_latency_s

    m = ModelShape(layers=3, hidden=16, heads=2, ffn=64, vocab=32, seq=64, mlp="gelu")
    c = cluster("H100-SXM", gpus_per_node=1, nodes=2)
    t = Training(global_batch_tokens=2 * 4 * 64, seq=64)
    p = Plan(dp=2, zero=2, micro_batch=1, microbatches=4)
    st = stage_time(m, c, t, p, 3, first=True, last=True)
    _, total = data_parallel_exposed(m, c, t, p, st, 3)
    ll = protocol_latency_s("all-gather", 2, 2, "ll")
    assert total == pytest.approx(4 * (2 * 3 + 2) * ll, rel=0.05)


def test_gradient_reduction_after_the_backward_is_exposed_whole():
    """Megatron-LM 2021's local DDP all-reduces the gradients after the last backward: the whole all-reduce shows
    (no hiding, no SM tax, no separate last bucket); PyTorch DDP hides all but its last 25 MB bucket. For Llama 2 7B
    on 2 x 8 H100s at DP 16, fp32 gradients: exposed = all-reduce(4 B x N) exactly. Would catch the flag ignored."""
    from dataclasses import replace

    m = preset("7B")
    c = cluster("H100-SXM", nodes=2)
    t = Training(global_batch_tokens=16 * 4096, seq=4096, precision="mixed-fp32-grads")
    p = Plan(dp=16, zero=0, micro_batch=1, microbatches=1)
    st = stage_time(m, c, t, p, m.layers, first=True, last=True)
    g = comms.group(c, 16, 1)
    whole = comms.seconds("all-reduce", m.params() * 4, g)
    exposed, total = data_parallel_exposed(m, c, replace(t, grad_reduce_overlap=False), p, st, m.layers)
    assert total == pytest.approx(whole, rel=1e-12) and exposed == pytest.approx(whole, rel=1e-12)
    hidden, _ = data_parallel_exposed(m, c, t, p, st, m.layers)
    assert hidden < 0.5 * whole


def test_loss_bytes_follow_the_training_code():
    """The last stage's loss reads and writes the logits as the run's code does: Megatron's fp32 vocab-parallel
    cross-entropy (38 bytes per logit forward, 14 backward) against flash-attn's fused one (2 and 4). For 4096 tokens
    over a 50,304 vocabulary on an H100, the head's time differs by tokens x V x (36, 10) bytes at 80 % of HBM. Would
    catch the loss priced the same whatever the code."""
    from distlab.planner.kernels import head_times

    m = ModelShape(layers=2, hidden=1024, heads=8, ffn=4096, vocab=50304, seq=4096, mlp="gelu")
    chip = H100.gpu
    mf, mb = head_times(m, chip, 4096, 1, "bf16", kernels="megatron")
    ff, fb = head_times(m, chip, 4096, 1, "bf16", kernels="llm-foundry")
    hbm = chip.hbm_bytes_per_s * 0.8
    assert mf - ff == pytest.approx(4096 * 50304 * 36 / hbm, rel=1e-12)
    assert mb - fb == pytest.approx(4096 * 50304 * 10 / hbm, rel=1e-12)
