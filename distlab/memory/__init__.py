"""Chapters 1 and 3: where the bytes of a training step go (model states, activations, checkpointing)."""
