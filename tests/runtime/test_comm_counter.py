"""CommCounter against collectives of known, awkward sizes on 3 real gloo processes.

Independent reference: the message sizes written out by hand below (nccl-tests' convention: the reduced
buffer for all-reduce, the whole gathered output for all-gather, the whole input for reduce-scatter), and
the ring factors 2(N-1)/N and (N-1)/N. All counts are exact.
"""

import pytest
import torch
import torch.distributed as dist

from distlab.runtime.comm_counter import CommCounter
from distlab.runtime.launcher import launch
from distlab.sharding.zero1 import all_gather_flat, reduce_scatter_flat


def _known_collectives(rank, world):
    ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(7, 5))  # its start-up broadcast: not counted
    with CommCounter(world) as comm:
        total = torch.ones(97)  # fp32, 388 B
        dist.all_reduce(total)
        gathered = torch.empty(3 * 5, dtype=torch.bfloat16)  # 5 bf16 per rank: message 30 B
        all_gather_flat(gathered, torch.full((5,), float(rank), dtype=torch.bfloat16))
        mine = torch.empty(7)
        reduce_scatter_flat(mine, torch.ones(21))  # message: the 84-byte input
        b = torch.zeros(11, dtype=torch.float64) + rank  # 88 B
        dist.broadcast(b, src=0)
        pieces = [torch.empty(4) for _ in range(world)]
        dist.all_gather(pieces, torch.ones(4))  # list form: 3 x 16 B
    dist.all_reduce(torch.ones(3))  # outside the context
    with CommCounter(world) as ddp_comm:
        ddp(torch.randn(2, 7)).sum().backward()  # DDP's C++ reducer all-reduces 40 fp32 gradients
    return {
        "summary": comm.summary(),
        "sent": comm.sent_bytes(),
        "ddp": ddp_comm.summary(),
        "values": (float(total[0]), gathered.float().tolist(), float(mine[0]), float(b[0])),
    }


@pytest.fixture(scope="module")
def ranks():
    return launch(_known_collectives, 3, timeout_s=120)


def test_message_bytes_and_calls_per_collective(ranks):
    """Would catch counting the all-gather input (10 B) instead of its output (30 B), the reduce-scatter
    output (28 B) instead of its input, or a nested call counted twice."""
    for x in ranks:
        s = x["summary"]
        assert {op: (v["calls"], v["message_bytes"]) for op, v in s.items()} == {
            "all-reduce": (1, 388),
            "all-gather": (2, 30 + 48),
            "reduce-scatter": (1, 84),
            "broadcast": (1, 88),
        }


def test_sent_bytes_use_ring_factors(ranks):
    """(N-1)/N = 2/3 for gathers and scatters, twice that for all-reduce, 1 for broadcast."""
    s = ranks[0]["summary"]
    assert s["all-reduce"]["sent_bytes"] == pytest.approx(2 * 2 / 3 * 388, rel=1e-12)
    assert s["all-gather"]["sent_bytes"] == pytest.approx(2 / 3 * 78, rel=1e-12)
    assert s["reduce-scatter"]["sent_bytes"] == pytest.approx(2 / 3 * 84, rel=1e-12)
    assert ranks[0]["sent"] == pytest.approx(4 / 3 * 388 + 2 / 3 * 78 + 2 / 3 * 84 + 88, rel=1e-12)


def test_counting_does_not_change_results(ranks):
    for x in ranks:
        total, gathered, mine, b = x["values"]
        assert total == 3 and mine == 3 and b == 0
        assert gathered == [0.0] * 5 + [1.0] * 5 + [2.0] * 5


def test_ddp_reducer_is_seen(ranks):
    """DDP all-reduces from C++, not through torch.distributed's Python functions: a counter that wraps
    those would see nothing here. 7 x 5 weights + 5 biases, fp32."""
    assert {op: (v["calls"], v["message_bytes"]) for op, v in ranks[0]["ddp"].items()} == {"all-reduce": (1, 160)}


def test_bad_arguments():
    with pytest.raises(ValueError, match="world_size"):
        CommCounter(0)
    with pytest.raises(ValueError, match="unknown collective"):
        CommCounter(2).sent_bytes("all-reduse")
