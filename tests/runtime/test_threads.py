"""One thread for CPU measurements, always restored: the build runs every experiment in one process."""

import pytest
import torch

from distlab.runtime.threads import one_core, single_threaded, torch_threads


def test_count_is_restored_even_when_the_block_raises():
    """Would catch an experiment that leaves torch on one thread for every experiment after it."""
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError), torch_threads(1):
        assert torch.get_num_threads() == 1
        raise RuntimeError("boom")
    assert torch.get_num_threads() == before


def test_decorator_and_device_switch():
    before = torch.get_num_threads()
    assert single_threaded(torch.get_num_threads)() == 1
    with one_core("cuda"):
        assert torch.get_num_threads() == before  # CUDA: nothing changes
    assert torch.get_num_threads() == before
