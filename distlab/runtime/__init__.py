"""Running real processes and measuring them: the multi-process launcher (gloo on CPU, NCCL on GPUs,
torchrun), thread settings for one-core measurements, a counter of collectives, and a counter of the tensors
autograd saves for backward (with a naive activation checkpoint)."""
