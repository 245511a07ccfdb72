# Chapter 8: FlashAttention (exactness, memory, HBM traffic, FLOPs and the roofline, the GPU benchmark).
from distlab.site import Page

with Page("08-flash-attention.md") as page:
    page.run("flash-attention-exact")
    page.run("flash-attention-memory")
    page.run("flash-attention-io")
    page.run("flash-attention-flops")
    page.run("flash-attention-compile")
    page.run("flash-attention-bench")
