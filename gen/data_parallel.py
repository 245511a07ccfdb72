# Chapter 5: data parallelism on real processes (ring all-reduce, DDP, accumulation, buckets, SyncBN, batch/LR).
from distlab.site import Page

with Page("05-data-parallel.md") as page:
    page.run("ring-allreduce")
    page.run("ddp-consistency")
    page.run("grad-accumulation")
    page.run("ddp-buckets")
    page.run("syncbn")
    page.run("batch-lr-scaling")
