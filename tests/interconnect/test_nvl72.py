"""The GB200 NVL72 data against relations a typo would break, and the worked placement's claims."""

import pytest

from distlab.core.facts import value
from distlab.interconnect.nvl72 import nvl72_placement


def test_rack_data_relations():
    """Catches a typo in the rack's entry: 36 superchips x 2 GPUs = 72 = 18 trays x 4, and the printed aggregate
    NVLink bandwidth is 72 x 1.8 TB/s to the rounding NVIDIA prints."""
    e = "interconnect.NVSwitch-GB200-NVL72"
    gpus = value(f"{e}.gpus_per_domain")
    assert value(f"{e}.superchips") * value(f"{e}.gpus_per_superchip") == gpus == 72
    assert gpus % value(f"{e}.gpus_per_tray") == 0 and gpus // value(f"{e}.gpus_per_tray") == 18
    assert value(f"{e}.aggregate_nvlink_tbytes_per_s") == pytest.approx(gpus * 1.8, rel=0.01)


def test_worked_placement_holds():
    """Catches a placement whose claims fail (EP 64 not hidden in the rack, a tray split, a wrong hop time)."""
    r = nvl72_placement("cpu")
    assert not r.failed_claims
    assert (
        r.quantities["ep64_nvl72_fstar"].value
        < r.quantities["deepseek_ffn"].value
        < r.quantities["ep64_hgx_fstar"].value
    )
