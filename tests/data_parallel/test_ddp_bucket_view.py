"""gradient_as_bucket_view on 2 real gloo processes: the gradient storage, counted by address, against 4 bytes x
the parameter count (one copy with the view, two without), and the gradients bit-identical either way."""

from distlab.data_parallel.ddp_bucket_view import CFG, bucket_view_rank
from distlab.models.gpt import param_count
from distlab.runtime.launcher import launch


def test_bucket_view_memory_and_gradients():
    """Catches a view that still copies (two storages), a count that double-counts views, or gradients that
    change with the setting."""
    ranks = launch(bucket_view_rank, 2, "cpu", timeout_s=180)
    psi = 4 * param_count(CFG)
    for x in ranks:
        assert x[True]["grad_storage_bytes"] == psi and x[False]["grad_storage_bytes"] == 2 * psi
        assert x[True]["grads_in_buckets"] and not x[False]["grads_in_buckets"]
        assert x[True]["grads"].equal(x[False]["grads"])
    assert ranks[0][True]["grads"].equal(ranks[1][True]["grads"])
