"""Chapter 2: the GPU mental model (datasheets, the measured roofline, matmul dtypes, FLOPs and MFU)."""
