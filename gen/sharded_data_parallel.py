# Chapter 6: ZeRO 1-3 and FSDP.
from distlab.site import Page

with Page("06-sharded-data-parallel.md") as page:
    pass
