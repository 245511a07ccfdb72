"""Saved-tensor accounting and checkpointing against independent counts: the block's saves written out by
hand per operation, a tracker checked on operations whose saves are known, gradients of checkpointed
stacks against plain backward (bit-exact on CPU: the same kernels run on the same inputs in the same
order), and recompute counts."""

import pytest
import torch
from torch import nn

from distlab.memory.activation_memory import (
    DTYPE,
    Checkpoint,
    SavedTensors,
    block,
    max_grad_difference,
    measure_block,
    measure_stack,
)


def hand_count(s, b, h, a, dropout):
    """Bytes per tensor, by the operation that saves it (bf16 = 2 B, bool = 1 B; CPU LayerNorm statistics
    in bf16, one mean and one 1/std per row)."""
    tokens = s * b
    ln = 2 * tokens * h + 2 * 2 * tokens  # input, mean, rstd
    qkv_in, q_and_k, v = 2 * tokens * h, 2 * 2 * tokens * h, 2 * tokens * h
    causal_mask = s * s
    scores = a * s * s * b
    softmax_out = 2 * scores
    proj_in, up_in, gelu_in, down_in = 2 * tokens * h, 2 * tokens * h, 2 * tokens * 4 * h, 2 * tokens * 4 * h
    total = 2 * ln + qkv_in + q_and_k + v + causal_mask + softmax_out + proj_in + up_in + gelu_in + down_in
    if dropout:
        total += scores + 2 * scores  # the mask on the probabilities, the dropped-out probabilities
        total += tokens * h + tokens * h  # the masks after attention and after the MLP
    return total


@pytest.mark.parametrize(("s", "b", "h", "a"), [(97, 3, 60, 5), (33, 1, 48, 3)])
@pytest.mark.parametrize("dropout", [0.1, 0.0])
def test_block_saves_what_each_operation_needs(s, b, h, a, dropout):
    """Would catch a double-counted buffer (the softmax output that × V also saves) or a missing mask."""
    out = measure_block(s, b, h, a, dropout=dropout)
    assert out["bytes"] == hand_count(s, b, h, a, dropout > 0)
    assert out["left_after_backward"] == 0
    weights = 3 * h * h + h * h + 4 * h * h + 4 * h * h
    assert out["param_bytes"] == 2 * (weights + 4 * h)  # + LayerNorm weights and biases, no linear biases


def test_tracker_counts_storages_once_and_parameters_apart():
    """Would catch counting views of one buffer twice, or a parameter as an activation."""
    lin = nn.Linear(8, 8)
    x = torch.randn(4, 8, requires_grad=True)
    with SavedTensors(lin) as saved:
        y = lin(x)  # saves x (4 x 8 fp32) and the weight
        z = torch.tanh(y)  # saves its output (4 x 8)
        w = y[:, :4] * y[:, 4:]  # two views of y's storage: one buffer
    assert saved.live == 3 * 4 * 8 * 4
    assert saved.param_bytes == 8 * 8 * 4
    (z.sum() + w.sum()).backward()
    assert saved.live == 0 and saved.peak == 3 * 4 * 8 * 4


def _stack(n, h=48, a=3):
    return [block(h, a, dropout=0.5, seed=i) for i in range(n)]


def test_naive_checkpoint_gives_the_same_gradients_and_runs_forward_twice():
    """With dropout at 0.5, a checkpoint that did not restore the RNG state would draw other masks in the
    recompute and get other gradients; one that did not recompute would count no extra forwards."""
    layers = _stack(3)
    x = torch.randn(2, 19, 48, dtype=DTYPE)
    plain = measure_stack(layers, x)
    full = measure_stack(layers, x, checkpointed=3)
    torch_full = measure_stack(layers, x, checkpointed=3, use_torch=True)
    selective = measure_stack(layers, x, selective=True)
    assert max_grad_difference(full["grads"], plain["grads"]) == 0
    assert max_grad_difference(torch_full["grads"], plain["grads"]) == 0
    assert max_grad_difference(selective["grads"], plain["grads"]) == 0
    assert (plain["recomputed"], full["recomputed"], torch_full["recomputed"]) == (0, 3, 3)
    assert (selective["recomputed"], selective["core_recomputed"]) == (0, 3)
    inputs = 3 * 2 * 19 * 48 * 2
    assert full["held"] == torch_full["held"] == inputs
    assert plain["held"] == 3 * hand_count(19, 2, 48, 3, True)
    assert full["left"] == plain["left"] == selective["left"] == 0


def test_dropout_masks_differ_without_rng_restore():
    """The reason Checkpoint saves the RNG state: two forwards of one block draw different masks."""
    blk = block(48, 3, dropout=0.5)
    x = torch.randn(1, 7, 48, dtype=DTYPE)
    assert not torch.equal(blk(x), blk(x))


def test_checkpoint_of_a_multi_input_function():
    """Would catch gradients returned for the wrong inputs."""
    a, b = torch.randn(5, 3, requires_grad=True), torch.randn(5, 3, requires_grad=True)
    out = Checkpoint.apply(lambda p, q: (p * q.exp()).sum(), a, b)
    out.backward()
    assert torch.allclose(a.grad, b.detach().exp()) and torch.allclose(b.grad, (a * b.exp()).detach())


@pytest.mark.parametrize(("segment", "checkpointed"), [(2, 5), (3, 5), (1, 2)])
def test_partial_and_segmented_recompute_counts(segment, checkpointed):
    """One extra forward per checkpointed layer, whatever the segment length."""
    chain = [nn.Tanh() for _ in range(5)]
    run = measure_stack(chain, torch.randn(64), checkpointed=checkpointed, segment=segment)
    assert run["recomputed"] == checkpointed
    segments = -(-checkpointed // segment)
    assert run["held"] == (segments + 5 - checkpointed) * 64 * 4
