"""Packing with document masks (chapters 3 and 8): masks against per-document attention at awkward sizes, the
first-fit packer's invariants, and the waste counts against hand arithmetic."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from distlab.attention.packing import document_ids, document_mask, flex_document, naive_causal, pack, schemes, varlen


def test_document_mask_equals_each_document_alone():
    """Documents of 1, 13 and 83 tokens in a 100-token window (3 pad tokens), head width 5. Would catch a mask that
    lets a document see the previous one, or a causal diagonal off by one."""
    docs = [1, 13, 83]
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 100, 5, generator=g, dtype=torch.float64) for _ in range(3))
    doc = document_ids(docs, 100)
    dense = F.scaled_dot_product_attention(q, k, v, attn_mask=document_mask(doc))
    flex, _ = flex_document(q, k, v, doc)
    cu = [0, 1, 14, 97]
    by_len = varlen(q, k, v, cu)
    for a, b in zip(cu[:-1], cu[1:]):
        want = naive_causal(q[:, a:b], k[:, a:b], v[:, a:b])
        for got in (dense, flex, by_len):
            torch.testing.assert_close(got[:, a:b], want, rtol=0, atol=1e-12)


def test_pack_keeps_every_example_and_fits_the_window():
    """Would catch an example dropped, split, or a window overfilled."""
    lengths = [4096, 1, 4095, 2048, 2049, 3000, 97, 1000, 5]
    bins = pack(lengths, 4096)
    assert sorted(x for b in bins for x in b) == sorted(lengths)
    assert all(sum(b) <= 4096 for b in bins)
    # First fit decreasing, by hand: 4096 fills a window; 4095 opens one (room 1); 3000 opens one (1096); 2049 opens
    # one (2047); 2048 does not fit there and opens a fifth; 1000 -> third; 97 -> fourth; 5 -> third; 1 -> second.
    assert bins == [[4096], [4095, 1], [3000, 1000, 5], [2049, 97], [2048]]


def test_waste_counts_by_hand():
    """Three examples of 3, 5 and 8 tokens in windows of 8, batches of 2: padding to the window computes 24 tokens
    and 3 x 36 pairs; dynamic padding (5, 5) then (8): 18 tokens; packing [8], [5, 3]: 16 tokens, 6 + 15 + 36 pairs."""
    c = schemes([3, 5, 8], 8, batch=2)
    assert c["useful"] == {"tokens": 16, "pairs": 6 + 15 + 36}
    assert c["pad to the window"] == {"tokens": 24, "pairs": 3 * 36}
    assert c["pad to the batch's longest"] == {"tokens": 18, "pairs": 2 * 15 + 36}
    assert c["packed, document mask"] == {"tokens": 16, "pairs": 57}
    assert c["packed, causal mask over the window"] == {"tokens": 16, "pairs": 2 * 36}
