"""Megatron tensor parallelism on a real gloo world of 3 (an awkward size: 12 heads, ffn 288, head dim 6)
against the unsplit distlab.models.gpt.Block in float32 and float64, computed independently on every rank.

Bit-exact: each rank's weight-matrix gradients of a sub-layer run alone (the same dot products over
the same operands as the matching slice of the full layer). Only close: anything that passes through
an all-reduce (a sum of t partial sums adds in a different order), and in a whole block everything
downstream of the first all-reduce.
"""

import pytest
import torch

from distlab.model_parallel.tensor_parallel import (
    CONFIG,
    MATRICES,
    SEQ,
    TensorParallelBlock,
    close_bound,
    ring_wire_bytes,
    run_checks,
)

T = 3


@pytest.fixture(scope="module")
def ranks():
    return run_checks("cpu", world=T, group_sizes=(T,))


def test_sublayer_weight_gradients_are_bit_exact(ranks):
    """Would catch a wrong slice (a rank holding another rank's heads or q/k/v rows in the wrong order):
    that gives an O(1) difference, not a rounding one."""
    for part in ("attention", "mlp"):
        for res in ranks:
            for name in MATRICES:
                if name in res[(T, part)]["grads"]:
                    assert res[(T, part)]["grads"][name] == 0.0, (part, name)


@pytest.mark.parametrize("part", ["attention", "mlp", "block", "sp"])
def test_outputs_and_input_gradients_are_close(part, ranks):
    """Would catch a missing f (input gradient only 1/t of the sum) or a bias added t times."""
    unsplit = "block" if part in ("block", "sp") else part
    first = ranks[0]
    for res in ranks:
        got = res[(T, part)]
        assert got["output_vs_fp64"] <= close_bound(
            first[f"{unsplit}_fp32_output_vs_fp64"], first[f"{unsplit}_output_scale"]
        )
        assert got["input_grad_vs_fp64"] <= close_bound(
            first[f"{unsplit}_fp32_input_grad_vs_fp64"], first[f"{unsplit}_input_grad_scale"]
        )


def test_block_gradients_close_including_layernorm_under_sequence_parallelism(ranks):
    """Would catch LayerNorm gradients under sequence parallelism not summed over the group (each rank
    would hold the gradient of its 1/t of the tokens: off by O(1))."""
    for res in ranks:
        for part in ("block", "sp"):
            got = res[(T, part)]
            for name, diff in got["grads"].items():
                assert diff <= 16 * 2.0**-23 * got["grad_scales"][name], (part, name)


def test_two_all_reduces_forward_two_backward_with_their_bytes(ranks):
    """The f and g operators: one all-reduce per sub-layer in each direction, of one (B, N, h) fp32
    activation. Would catch a g in backward (a double reduction) or an extra all-reduce."""
    act = 3 * SEQ * CONFIG["hidden"] * 4
    log = ranks[0][(T, "block")]["log"]
    assert [(op, phase) for op, phase, _ in log] == [("all-reduce", "forward")] * 2 + [("all-reduce", "backward")] * 2
    assert {b for _, _, b in log} == {act}
    for part in ("attention", "mlp"):
        assert [(op, phase) for op, phase, _ in ranks[0][(T, part)]["log"]] == [
            ("all-reduce", "forward"),
            ("all-reduce", "backward"),
        ]


def test_sequence_parallel_replaces_each_all_reduce_by_reduce_scatter_and_all_gather(ranks):
    """Korthikanti et al.: same bytes on the wire. Ring: all-reduce 2(t-1)/t N = reduce-scatter
    (t-1)/t N + all-gather (t-1)/t N."""
    tp = ranks[0][(T, "block")]["log"]
    sp = [e for e in ranks[0][(T, "sp")]["log"] if e[1] != "grad-sync"]
    assert sorted(op for op, _, _ in sp) == ["all-gather"] * 4 + ["reduce-scatter"] * 4
    for phase in ("forward", "backward"):
        tp_bytes = sum(ring_wire_bytes(o, b, T) for o, p, b in tp if p == phase)
        sp_bytes = sum(ring_wire_bytes(o, b, T) for o, p, b in sp if p == phase)
        assert sp_bytes == pytest.approx(tp_bytes, rel=1e-12)
        assert tp_bytes == pytest.approx(2 * 2 * (T - 1) / T * 3 * SEQ * CONFIG["hidden"] * 4, rel=1e-12)


def test_every_rank_holds_the_same_output_bits(ranks):
    outs = [res[(T, "block")]["output_bits"] for res in ranks]
    assert all(torch.equal(outs[0], o) for o in outs[1:])


def test_ring_wire_bytes_closed_form():
    assert ring_wire_bytes("all-reduce", 1000, 4) == 1500
    assert ring_wire_bytes("all-gather", 1000, 4) == ring_wire_bytes("reduce-scatter", 1000, 4) == 750
    assert ring_wire_bytes("all-reduce", 1000, 1) == 0


def test_heads_must_divide():
    from distlab.models.gpt import Block, GPTConfig

    class FakeComm:
        size, rank = 5, 0

    with pytest.raises(ValueError, match="divisible"):
        TensorParallelBlock(Block(GPTConfig(**CONFIG)), FakeComm())
