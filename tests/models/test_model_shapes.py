"""Parameter counts of published models against their published totals."""

import json

import pytest

from distlab.models.shapes import ModelShape, from_json, preset


@pytest.mark.parametrize(
    ("name", "published", "rel"),
    [
        ("7B", 6_738_415_616, 0),  # Llama 2 7B, exact from the released checkpoint
        ("13B", 13_015_864_320, 0),  # Llama 2 13B, exact from the released checkpoint
        ("70B", 68_976_648_192, 0),  # Llama 2 70B, exact from the released checkpoint
        ("175B", 175e9, 0.01),  # GPT-3, "175B" in Table 2.1
        ("1B", 1_235_814_400, 0),  # Llama 3.2 1B, exact (tied embeddings)
    ],
)
def test_preset_param_counts(name, published, rel):
    assert preset(name).params() == pytest.approx(published, rel=rel, abs=0)


def test_bad_shapes_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="divisible"):
        ModelShape(layers=2, hidden=100, heads=3, ffn=10, vocab=10)
    bad = tmp_path / "m.json"
    bad.write_text(json.dumps({"layers": 2, "hidden": 64, "heads": 4, "ffn": 10, "vocab": 10, "color": 1}))
    with pytest.raises(ValueError, match="unknown keys"):
        from_json(bad)
    with pytest.raises(ValueError, match="unknown model preset"):
        preset("3B")
