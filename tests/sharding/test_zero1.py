"""Our ZeRO-1 on 3 real gloo processes against plain AdamW in one process, with an awkward model.

Ψ = 22,970 = 3 x 7,657 - 1, so the flat buffer pads 1 element on the last rank; head dim 10, ffn 70.
Independent reference: torch.optim.AdamW on the whole global batch in this process (written out below),
and the shard sizes and message sizes written out by hand. Parameters agree only to a few fp32 ulps (the
cross-rank gradient sum adds in another order); shard sizes, state bytes, traffic and the replicas' mutual
agreement are exact.
"""

import pytest
import torch

from distlab.models.gpt import GPTConfig, param_count
from distlab.runtime.launcher import launch
from distlab.sharding.equivalence import ADAMW, bias_masks, global_batch, seeded_model
from distlab.sharding.zero1 import zero1_rank

CFG = GPTConfig(vocab=101, seq=19, layers=2, hidden=30, heads=3, ffn=70, tie_embeddings=False)
PSI, SHARD, STEPS = 22_970, 7_657, 2


@pytest.fixture(scope="module")
def ranks():
    return launch(zero1_rank, 3, "cpu", CFG, STEPS, timeout_s=180)


@pytest.fixture(scope="module")
def reference():
    """Plain AdamW, one process, global batch: the thing ZeRO-1 must reproduce."""
    model = seeded_model(CFG, "cpu")
    opt = torch.optim.AdamW(model.parameters(), **ADAMW)
    for step in range(STEPS):
        x, y = global_batch(CFG, step, 3, "cpu")
        opt.zero_grad()
        model(x, y).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]), bias_masks(model)["key"]


def test_sizes_are_what_the_test_assumes():
    assert param_count(CFG) == PSI and -(-PSI // 3) == SHARD


def test_each_rank_keeps_ceil_psi_over_n_of_adam_state(ranks):
    """Remainder rule: every rank owns ⌈Ψ/N⌉ = 7,657 elements (m and v, 4 B each). Would catch floor division
    (7,656: the last element would have no owner) or a rank keeping the full state."""
    for x in ranks:
        assert x["state"]["m_v"] == 8 * SHARD
        assert x["owned"].numel() == SHARD


def test_owned_shards_tile_the_parameters(ranks):
    """The owned shards, in rank order, are the flat parameter vector plus one zero of padding. Would catch
    a wrong offset (a rank updating its neighbour's slice) or padding that drifts under weight decay."""
    tiled = torch.cat([x["owned"] for x in ranks])
    assert torch.equal(tiled[:PSI], ranks[0]["zero1"]["params"])
    assert torch.equal(tiled[PSI:], torch.zeros(3 * SHARD - PSI))


@pytest.mark.parametrize("variant", ["zero1", "naive", "ddp"])
def test_parameters_match_one_process(ranks, reference, variant):
    """16 fp32 ulps of the largest weight, key biases apart (their gradient is rounding noise that Adam
    scales up to ~lr, see zero1.bias_masks); ranks bit-identical. Would catch a sum instead of a mean over
    ranks, a stale shard after the all-gather, or a rank training on the wrong slice of the batch."""
    ref, key = reference
    tol = 16 * torch.finfo(torch.float32).eps * float(ref.abs().max())
    for x in ranks:
        p = x[variant]["params"]
        assert float((p - ref)[~key].abs().max()) <= tol
        assert float((p - ref)[key].abs().max()) <= 2 * ADAMW["lr"] * STEPS
        assert torch.equal(p, ranks[0][variant]["params"])


def test_traffic_per_step(ranks):
    """Message sizes per step, fp32: ZeRO-1 reduce-scatters and all-gathers the padded buffer 3 x 7,657
    elements; naive ZeRO-1 all-reduces it; DDP all-reduces exactly Ψ elements."""
    padded = 4 * 3 * SHARD
    per_step = {
        v: {
            op: (s["calls"] / STEPS, s["message_bytes"] / STEPS)
            for op, s in ranks[0][v]["comm"].items()
            if op != "broadcast"
        }
        for v in ("zero1", "naive", "ddp")
    }
    assert per_step["zero1"] == {"reduce-scatter": (1, padded), "all-gather": (1, padded)}
    assert per_step["naive"] == {"all-reduce": (1, padded), "all-gather": (1, padded)}
    assert per_step["ddp"] == {"all-reduce": (1, 4 * PSI)}
    assert ranks[0]["zero1"]["sent_per_step"] == pytest.approx(2 * 2 / 3 * padded, rel=1e-12)
    assert ranks[0]["naive"]["sent_per_step"] == pytest.approx(3 * 2 / 3 * padded, rel=1e-12)
