"""Running real processes and measuring them: the multi-process launcher (gloo on CPU, NCCL on GPUs,
torchrun), thread settings for one-core measurements, and a counter of collectives."""
