"""The saved-tensor counter's bookkeeping on operations whose saves are known by hand."""

import torch
from torch import nn

from distlab.runtime.saved_tensors import SavedTensors


class Scale(nn.Module):
    """x · c for a constant buffer c: autograd keeps c (for x's gradient), which is model state, not activation."""

    def __init__(self):
        super().__init__()
        self.register_buffer("c", torch.full((8,), 3.0))

    def forward(self, x):
        return torch.tanh(x * self.c)  # tanh keeps its output


def test_buffers_are_set_apart_and_records_follow_the_save_order():
    """Would catch a module buffer (RoPE's tables) counted as an activation, or records out of order or double."""
    mod = Scale()
    x = torch.randn(5, 8, requires_grad=True)
    with SavedTensors(mod, outside="top") as saved:
        y = mod(x)
        z = y * y  # y saved twice by one op: one buffer
        assert [(r.module, r.shape, r.dtype, r.bytes) for r in saved.records] == [("block", (5, 8), "float32", 160)]
        assert saved.live == 160 and saved.param_bytes == 0
        w = x.exp()  # outside the module: attributed to `outside`
        assert saved.records[-1].module == "top" and saved.live == 320
        (z.sum() + w.sum()).backward()
    assert saved.live == 0 and saved.peak == 320
