"""distlab: every number on the site, derived in code and checked at build time."""

import os as _os

__version__ = "0.1.0"

# Triton reads TRITON_INTERPRET when it is first imported, and torch imports triton early (its flop
# counter and profiler do). On a machine with no GPU driver, switch to Triton's interpreter before anything
# imports torch, so the FlashAttention kernel runs on CPU tensors whatever was imported first.
if not any(_os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/kfd")):
    _os.environ.setdefault("TRITON_INTERPRET", "1")
