"""Mixture-of-experts models from a JSON file, and head_dim apart from hidden / heads: a built-in MoE model written
out as JSON prices bit for bit as the built-in (same plan, memory and step), a Qwen3-shaped file's parameter count
against Qwen's published 30.5B, its QKV GEMM at heads x head_dim, and the one-line refusals."""

import json

import pytest

from distlab.core.facts import entries
from distlab.planner.config import Plan, Training, cluster
from distlab.planner.cost import memory_per_gpu, step
from distlab.planner.kernels import gemm_seconds, layer_shape, layer_times, training_share
from distlab.planner.plan_command import resolve_model
from distlab.planner.search import search
from distlab.planner.stages import split_params

PRICED = ("name", "layers", "hidden", "heads", "kv_heads", "ffn", "moe_ffn", "vocab", "seq", "experts")
PRICED += ("shared_experts", "top_k", "dense_layers", "tie_embeddings")

# Qwen3-30B-A3B's config.json (huggingface.co/Qwen/Qwen3-30B-A3B): 48 layers, hidden 2048, 32 query heads of
# head_dim 128 (hidden / heads would be 64), 4 KV heads, 128 experts of width 768, 8 per token, vocab 151,936
QWEN3_30B = {
    "name": "Qwen3-30B-A3B",
    "layers": 48,
    "hidden": 2048,
    "heads": 32,
    "kv_heads": 4,
    "head_dim": 128,
    "ffn": 6144,
    "moe_ffn": 768,
    "experts": 128,
    "top_k": 8,
    "vocab": 151936,
    "seq": 4096,
}
QWEN3_30B_PUBLISHED = 30.5e9  # the model card: "Number of Parameters: 30.5B in total and 3.3B activated"


def _write(tmp_path, obj) -> str:
    path = tmp_path / "model.json"
    path.write_text(json.dumps(obj))
    return str(path)


@pytest.mark.parametrize("name", ["Mixtral-8x7B", "DeepSeek-V3"])
def test_builtin_moe_written_as_json_prices_bit_for_bit(tmp_path, name):
    """Would catch a JSON MoE priced as dense (no EP, no all-to-alls, no expert states), or through a second code
    path that drifts from the built-in one by a rounding."""
    row = {k: v for k, v in entries("moe_models")[name].items() if k in PRICED}
    built, spec = resolve_model(name)
    from_file, spec_file = resolve_model(_write(tmp_path, row))
    assert spec_file == spec and from_file == built
    c = cluster("H100-SXM", nodes=8)
    t = Training(global_batch_tokens=512 * 4096, seq=4096, moe=spec)
    t_file = Training(global_batch_tokens=512 * 4096, seq=4096, moe=spec_file)
    p = Plan(tp=2, pp=4, dp=8, ep=8, zero=1, microbatches=64)
    assert step(from_file, c, t_file, p).seconds == step(built, c, t, p).seconds
    assert memory_per_gpu(from_file, c, t_file, p).device_bytes == memory_per_gpu(built, c, t, p).device_bytes
    assert step(built, c, t, p).traffic_seconds["ep"] > 0  # priced as MoE: the all-to-alls are there


def test_qwen3_json_counts_its_published_parameters(tmp_path):
    """Qwen3-30B-A3B: 30.5B parameters (the model card) only with q at 32 x 128 = 4096 wide; taking head_dim as
    hidden / heads = 64 would give 30.1B (1.4 % short). Would catch head_dim dropped from the JSON path."""
    m, spec = resolve_model(_write(tmp_path, QWEN3_30B))
    assert m.head_dim == 128 and m.q_width == 4096
    total = sum(split_params(m, spec, Plan()))
    assert total == pytest.approx(QWEN3_30B_PUBLISHED, rel=0.005)


def test_qwen3_qkv_gemm_is_heads_times_head_dim_wide(tmp_path):
    """The QKV projection of one layer: tokens x (32 x 128 + 2 x 4 x 128) / TP outputs over the 2048-wide hidden,
    priced by gemm_seconds directly. Would catch the GEMM sized by hidden (2048 + 2 x 256)."""
    m, spec = resolve_model(_write(tmp_path, QWEN3_30B))
    t = Training(global_batch_tokens=64 * 4096, seq=4096, moe=spec)
    chip = cluster("H100-SXM").gpu
    ls = layer_shape(m, tokens=4096, kv_tokens=4096, micro_batch=1, tp=2, sp=True, t=t)
    lt = layer_times(m, chip, ls)
    from distlab.planner.kernels import MEMORY_EFFICIENCY

    expected = gemm_seconds(chip, 4096, (4096 + 1024) // 2, 2048, "bf16", MEMORY_EFFICIENCY, training_share())
    assert dict(lt.gemms)["qkv"] == expected


def test_json_moe_is_searched_with_ep(tmp_path):
    """`--ep 8` on a JSON MoE is no longer refused as dense, and the search tries EP. Would catch the old refusal."""
    m, spec = resolve_model(_write(tmp_path, QWEN3_30B))
    c = cluster("H100-SXM", nodes=2)
    t = Training(global_batch_tokens=256 * 4096, seq=4096, moe=spec)
    best = search(m, c, t, fixed={"ep": 8})[0]
    assert best.plan.ep == 8 and best.time.traffic_seconds["ep"] > 0


@pytest.mark.parametrize(
    "patch, message",
    [({"expert_count": 8}, "unknown key 'expert_count'"), ({"top_k": 200}, "top_k"), ({"head_dim": -4}, "head_dim")],
)
def test_bad_moe_files_are_refused_in_one_line(tmp_path, patch, message):
    """Would catch an unknown key silently ignored (a typo'd expert count priced as dense) or a traceback."""
    with pytest.raises(ValueError, match=message) as err:
        resolve_model(_write(tmp_path, QWEN3_30B | patch))
    assert "\n" not in str(err.value)
