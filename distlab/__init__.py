"""distlab: every number on the site, derived in code and checked at build time."""

import os as _os

__version__ = "0.1.0"

# The one rule for TRITON_INTERPRET, in the one place that sets it (tests/conftest.py imports distlab first;
# distlab.attention.triton_kernel only reads it). Triton reads the variable when it is first imported, and torch
# imports triton early (its flop counter and profiler do), so it is decided here, before anything imports torch:
# on a machine with no GPU driver, Triton's interpreter (the FlashAttention kernel runs on CPU tensors); with a
# driver, compiled kernels. An explicit setting always wins (TRITON_INTERPRET=1 to run the kernels on CPU tensors
# on a GPU machine; distlab.attention.triton_aot compiles in a child with TRITON_INTERPRET=0).
if not any(_os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/kfd")):
    _os.environ.setdefault("TRITON_INTERPRET", "1")
