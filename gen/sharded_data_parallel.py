# Chapter 6: ZeRO 1-3 and FSDP (memory and traffic per GPU, ZeRO-1 and FSDP2 on real processes, CPU offload).
from distlab.site import Page

with Page("06-sharded-data-parallel.md") as page:
    page.run("zero-memory")
    page.run("zero1-emulation")
    page.run("fsdp2-equivalence")
    page.run("cpu-offload")
