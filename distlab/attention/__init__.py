"""Chapter 8: FlashAttention (tiling and online softmax, HBM traffic, FLOPs, the Triton kernel)."""
