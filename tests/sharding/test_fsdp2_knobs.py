"""The bookkeeping of fsdp2-knobs against hand-worked logs: which group each logged collective ran on, and how
far the all-gathers run ahead of the forwards. (The real-process numbers are claimed on chapter 6's page.)"""

import pytest

from distlab.sharding.fsdp2_knobs import gathers_ahead, step_traffic

S = 1000  # message bytes of one module's all-gather / reduce-scatter


def _log(backward_gathers=2, all_reduce=False):
    log = [("forward", 0), ("all-gather", S), ("forward", 1), ("all-gather", S), ("backward", 0)]
    log += [("all-gather", S)] * backward_gathers + [("reduce-scatter", S)] * 2
    return log + ([("all-reduce", S // 2)] if all_reduce else [])


def test_traffic_flat_mesh():
    """Catches a wrong ring factor: on 4 ranks every all-gather and reduce-scatter sends 3/4 of its message."""
    sent = step_traffic(_log(), world=4, shard=4, hsdp=False, reshard=True)
    assert sent == {"forward all-gather": 1500, "backward all-gather": 1500, "reduce-scatter": 1500, "all-reduce": 0}


def test_traffic_int_reshard_uses_the_smaller_group():
    """Catches backward all-gathers charged to the whole shard group when reshard_after_forward is an int (2):
    they run inside pairs and send 1/2 of the message, the forward ones still 3/4."""
    sent = step_traffic(_log(), world=4, shard=4, hsdp=False, reshard=2)
    assert sent["forward all-gather"] == 1500 and sent["backward all-gather"] == 1000


def test_traffic_hsdp():
    """Catches HSDP's all-reduce charged to the whole world: on a 2x2 mesh it runs across the 2 replicas, the
    all-gathers and reduce-scatters inside the shard pair (a world of 3 x 2 checks the shapes are not mixed up)."""
    sent = step_traffic(_log(all_reduce=True), world=4, shard=2, hsdp=True, reshard=True)
    assert sent == {"forward all-gather": 1000, "backward all-gather": 1000, "reduce-scatter": 1000, "all-reduce": 500}
    sent = step_traffic(_log(all_reduce=True), world=6, shard=2, hsdp=True, reshard=True)
    assert sent["all-reduce"] == pytest.approx(2 * 2 / 3 * 500)


def test_gathers_ahead():
    """Catches a prefetch that is not seen: gathering module i+1 before module i's forward makes 2."""
    assert gathers_ahead([("all-gather", S), ("forward", 0), ("all-gather", S), ("forward", 1), ("backward", 0)]) == 1
    prefetched = [("all-gather", S), ("forward", 0), ("all-gather", S), ("all-gather", S), ("forward", 1)]
    assert gathers_ahead(prefetched + [("backward", 0), ("all-gather", S)]) == 2
