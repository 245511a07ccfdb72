"""Chapter 5: data parallelism on real processes (ring all-reduce, DDP, accumulation, buckets,
SyncBatchNorm, batch and learning-rate scaling)."""
