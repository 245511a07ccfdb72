"""The published runs' second printings: the SC21 script and the MPT configs read as their sources print them (values
read off the files at the pinned commits for this test), every typed field agrees, and a typo is named."""

from __future__ import annotations

import copy

import pytest

from distlab.core.facts import entries
from distlab.planner import corpus_checks as checks


def _named(monkeypatch, typos: dict[tuple[str, str], object]) -> set[str]:
    """The fields mismatches() names once `typos` ({(row, field): value}) are typed into published_runs.toml."""
    runs = copy.deepcopy(entries("published_runs"))
    for (row, field), typed in typos.items():
        runs[row][field] = typed
    monkeypatch.setattr(checks, "entries", lambda name: runs if name == "published_runs" else entries(name))
    return {w.split(" = ")[0] for w in checks.mismatches()[0]}


def test_the_sc21_script_reads_as_printed():
    cases = checks._sc21(entries("source_excerpts")["megatron-sc21-table-1"]["text"])
    assert len(cases) == 10
    assert {k: cases["530B"][k] for k in ("TP", "PP", "MBS", "GBS", "NLS", "HS", "NAH", "DDP", "NNODES")} == {
        "TP": "8",
        "PP": "35",
        "MBS": "1",
        "GBS": "2520",
        "NLS": "105",
        "HS": "20480",
        "NAH": "128",
        "DDP": "local",
        "NNODES": "315",
    }
    assert "--num-layers-per-virtual-pipeline-stage 5" in cases["76B"]["MEGATRON_EXTRA_PARAMS"]


def test_the_mpt_configs_read_as_printed():
    configs = checks._yamls(entries("source_excerpts")["llm-foundry-mpt-yamls"]["text"])
    assert sorted(configs) == ["13b", "1b", "30b", "3b", "70b", "7b"]
    assert configs["30b"] == {
        "max_seq_len": 2048,
        "d_model": 7168,
        "n_heads": 56,
        "n_layers": 48,
        "expansion_ratio": 4,
        "vocab_size": 50368,
    }


@pytest.mark.parametrize("typed, half", [(1.7, 0.05), (408, 0.5), (0.4125, 0.00005), (18.4, 0.05), (1008.0, 0.5)])
def test_half_a_unit_of_the_printed_digit(typed, half):
    assert checks.half_unit(typed) == pytest.approx(half)


def test_every_typed_field_with_a_second_printing_agrees():
    wrong, compared = checks.mismatches()
    assert wrong == []
    assert compared > 800  # 10 Narayanan rows x 16, 27 MPT rows x 19, the Llama/GPT-3 shapes, BLOOM's 15


def test_typos_are_named(monkeypatch):
    named = _named(
        monkeypatch,
        {
            ("narayanan2021-gpt-145b-a100-1536", "hidden"): 12188,  # one digit off
            ("mpt-7b-h100-8", "tokens_per_s_per_gpu"): 2
            * entries("published_runs")["mpt-7b-h100-8"]["tokens_per_s_per_gpu"],
            ("tt-llama31-70b-h100-256-fsdp32-tp8", "ffn"): 28762,  # two digits swapped
            ("bloom-176b-a100-384", "tflops_per_gpu"): 149.67,
            ("bloom-176b-a100-384", "heads"): 224,
        },
    )
    assert named == {
        "narayanan2021-gpt-145b-a100-1536.hidden",
        "narayanan2021-gpt-145b-a100-1536.params_billion",  # P = 12lh^2(...) no longer rounds to 145.6
        "mpt-7b-h100-8.tokens_per_s_per_gpu",
        "tt-llama31-70b-h100-256-fsdp32-tp8.ffn",
        "bloom-176b-a100-384.tflops_per_gpu",
        "bloom-176b-a100-384.heads",
    }


def test_torchtitans_tables_read_as_printed():
    tables = checks._torchtitan_tables(entries("source_excerpts")["torchtitan-2412-tables"]["text"])
    assert sorted(tables) == ["1", "2", "3", "4", "5", "6"]
    heading, rows = tables["5"]
    assert "512 GPUs (FSDP 8, TP 8, PP8)" in heading
    assert rows["Interleaved 1F1B"] == {"Schedule": "Interleaved 1F1B", "TPS/GPU": "128", "Memory(GiB)": "72.7"}
    assert tables["2"][1]["FSDP 4, CP 2"]["Sequence Length"] == "65536"


def test_a_torchtitan_typo_is_named(monkeypatch):
    typos = {
        ("tt-llama31-405b-h100-512-interleaved", "tokens_per_s_per_gpu"): 182,  # 128 with two digits swapped
        ("tt-llama31-8b-h100-8-fsdp4-cp2", "seq"): 32768,  # the neighbouring row's length
        ("tt-llama31-70b-h100-256-fsdp32-tp8-bf16-asynctp", "tokens_per_s_per_gpu"): 597.3,  # the vanilla column
        ("tt-llama31-8b-h200-32-fsdp-fp8", "global_batch"): 128,  # the 8-node run's
        ("tt-llama31-8b-h100-64-fsdp8-tp8-bf16", "recompute"): "full",  # the page says per-op SAC
    }
    assert _named(monkeypatch, typos) == {f"{row}.{field}" for row, field in typos}


def test_nvidias_tables_read_as_printed():
    excerpts = entries("source_excerpts")
    nemo = checks._md_rows(excerpts["nemo-2407-pretraining"]["text"])
    [gpt3] = [x for x in nemo if x["Model"] == "GPT3-175B" and x["#-GPUs"] == "512"]
    assert (gpt3["GBS"], gpt3["VP"], gpt3["Tokens / sec / GPU"]) == ("2048", "6", "825")
    bridge = checks._md_rows(excerpts["megatron-bridge-2511-h100"]["text"])
    [big] = [x for x in bridge if x["Model"] == "LLAMA3.1_405B"]
    assert (big["#-GPUs"], big["CP"], big["Tokens / sec / GPU"], big["Model TFLOP / sec / GPU"]) == (
        "1024",
        "2",
        "292",
        "737",
    )


def test_nvidia_and_node_typos_are_named(monkeypatch):
    typos = {
        ("nemo2407-llama2-70b-h100-64", "virtual"): 10,  # the 13B row's VP
        ("mbridge2511-llama3-70b-h100-64", "global_batch"): 256,
        ("nemo2407-gpt3-175b-h100-512", "gpus"): 521,  # no table row at that count: named, not raised
        ("bloom-176b-a100-384", "nics_per_node"): 8,
        ("narayanan2021-gpt-1t-a100-3072", "nic_gbits_per_s"): 400,
    }
    assert _named(monkeypatch, typos) == {f"{row}.{field}" for row, field in typos}
