"""Chapter 6: sharded data parallelism (ZeRO 1-3, FSDP2, CPU offload)."""
