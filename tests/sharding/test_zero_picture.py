"""The ZeRO drawing (chapter 6) shows the memory model's per-GPU bytes and what each stage shards."""

from __future__ import annotations

import math

import pytest

from distlab.core.drawing import legibility_problems
from distlab.sharding.zero import model_state_bytes_per_gpu
from distlab.sharding.zero_picture import draw_shards

SHARDED = {0: set(), 1: {"optimizer"}, 2: {"optimizer", "grads"}, 3: {"optimizer", "grads", "params"}}


def _draw(params: int, gpus: int):
    rows = [(f"stage {z}", model_state_bytes_per_gpu(params, gpus, z), SHARDED[z]) for z in range(4)]
    return draw_shards(rows, 80e9, gpus, "H100")


def _bars(fig):
    drawn, hatched = {}, {}
    for patch in fig.axes[0].patches:
        kind, i, state, *shard = (patch.get_gid() or "::").split(":")
        if kind == "seg":
            drawn[int(i)] = drawn.get(int(i), 0.0) + patch.get_width() * 1e9
            hatched.setdefault(int(i), set()).update({state} if shard else set())
    return drawn, hatched


@pytest.mark.parametrize(("params", "gpus"), [(6_738_415_616, 8), (97_000_001, 3), (1_000_000_000, 64)])
def test_bars_are_the_papers_closed_forms(params, gpus):
    """Would catch a drawing fed the wrong stage or a stacking bug: ZeRO-3's bar must be 16 x ceil(Ψ/N) bytes
    (the model states / N, padded), DDP's 16Ψ, ZeRO-1's 4Ψ + 12 ceil(Ψ/N), ZeRO-2's 2Ψ + 14 ceil(Ψ/N)."""
    shard = math.ceil(params / gpus)
    fig = _draw(params, gpus)
    drawn, hatched = _bars(fig)
    expected = [16 * params, 4 * params + 12 * shard, 2 * params + 14 * shard, 16 * shard]
    assert [drawn[z] for z in range(4)] == pytest.approx(expected, rel=1e-12)
    assert hatched == {0: set(), 1: {"optimizer"}, 2: {"optimizer", "grads"}, 3: {"optimizer", "grads", "params"}}


def test_printed_totals_follow_the_bars():
    """Would catch a total label left from another configuration: each printed total is its bar's length."""
    fig = _draw(6_738_415_616, 8)
    drawn, _ = _bars(fig)
    for text in fig.axes[0].texts:
        kind, _, i = (text.get_gid() or "").partition(":")
        if kind == "total":
            value = float(text.get_text().split()[0])
            assert value == pytest.approx(drawn[int(i)] / 1e9, rel=0.005), text.get_text()


def test_the_drawing_reads_on_a_phone_and_in_dark_mode():
    """Would catch type too small for a 390 px phone or a transparent background (dark text on slate)."""
    fig = _draw(6_738_415_616, 8)
    fig.canvas.draw()
    assert legibility_problems(fig) == []
