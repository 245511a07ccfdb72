"""The NCCL tuner entries against tuning.cc: values read out of the C text match NCCL's tables as published (read
off github.com/NVIDIA/nccl at the two commits for this test), and a typo in a typed entry is named."""

from __future__ import annotations

import copy

import pytest

from distlab.core.facts import entries
from distlab.interconnect import nccl_source_checks as checks


def _readings():
    source = entries("source_excerpts")
    return {
        **checks.readings_v2_20(source["nccl-tuning-v2-20"]["text"]),
        **checks.readings_v2_30(source["nccl-tuning-v2-30"]["text"]),
    }


@pytest.mark.parametrize(
    "key, published",
    [
        ("nccl-latency-nvlink.ring_simple_us", 3.4),  # hwLat[NVLINK][Ring][Simple], 2.20.3
        ("nccl-latency-nvlink.tree_simple_us", 28.0),  # Tree/Simple before 2.30 ...
        ("nccl-v2-30-latency-nvlink.tree_simple_us", 4.0),  # ... and after
        ("nccl-latency-net.nvls_tree_simple_us", 14.0),
        ("nccl-v2-30-latency-net.nvls_tree_simple_us", 20.9),
        ("nccl-latency-base.base_ring_simple_us", 8.4),
        ("nccl-v2-30-latency-base.base_pat_ll_us", 8.0),
        ("nccl-factors-v2-20.tree_ll_busbw_factor", 1.0 / 3.8),
        ("nccl-factors-v2-20.ring_ll_busbw_factor_single_node", 1.0 / 3.0),
        ("nccl-factors-v2-30.ring_ll_busbw_factor", 0.5),
        ("nccl-factors-v2-30.nvls_efficiency_blackwell", 0.74),
        ("nccl-net-overhead.net_overhead_amd_us", 2.0),
    ],
)
def test_values_read_from_the_c_text_are_nccls(key, published):
    assert _readings()[key] == pytest.approx(published, rel=1e-6)


def test_per_chip_tables_read_whole_rows_and_products():
    read = _readings()
    assert read["nccl-factors-v2-30.ll_max_gbytes_per_s_blackwell"] == pytest.approx([282.0, 90.0, 70.0])
    assert read["nccl-factors-v2-20.tree_max_gbytes_per_s_per_channel_ampere"] == pytest.approx([24.0, 23.6, 17.8])


def test_the_typed_entries_agree_with_the_source():
    assert checks.mismatches() == []


def test_a_typo_or_an_unread_field_is_named(monkeypatch):
    real = copy.deepcopy(entries("interconnect"))
    real["nccl-latency-pci"]["ring_ll128_us"] = 2.6  # one digit off
    real["nccl-factors-v2-30"]["ll_max_gbytes_per_s_hopper"] = [141.0, 54.0, 35.0]  # two digits swapped
    real["nccl-net-overhead"]["net_overhead_arm_us"] = 1.0  # a field tuning.cc has no line for
    monkeypatch.setattr(checks, "entries", lambda name: real if name == "interconnect" else entries(name))
    wrong = checks.mismatches()
    assert len(wrong) == 3
    assert any("nccl-latency-pci.ring_ll128_us = 2.6, tuning.cc says 2.5" in w for w in wrong)
    assert any("ll_max_gbytes_per_s_hopper" in w for w in wrong)
    assert any("net_overhead_arm_us = 1.0: no reading" in w for w in wrong)


def test_the_c_reader_skips_comments_and_reads_leading_dots():
    text = "static float t[2] = { /* 9.9 */ .6, 2*1.5 }; // 7.0\n"
    assert checks.table(text, "t[") == [0.6, 3.0]


def test_cpu_to_cpu_links_read_from_topo_h():
    text = entries("source_excerpts")["nccl-topo-v2-30"]["text"]
    assert checks.smp_bandwidths(text) == {
        "nccl-smp-intel-broadwell.inter_socket_gbytes_per_s": 6.0,
        "nccl-smp-intel-skylake.inter_socket_gbytes_per_s": 10.0,
        "nccl-smp-intel-sapphire-rapids.inter_socket_gbytes_per_s": 22.0,  # SRP_QPI_BW, as topo.h prints it
        "nccl-smp-intel-emerald-rapids.inter_socket_gbytes_per_s": 40.0,
        "nccl-smp-amd.inter_socket_gbytes_per_s": 16.0,
    }
