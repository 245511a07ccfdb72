# Chapter 5: data parallelism on real processes.
from distlab.site import Page

with Page("05-data-parallel.md") as page:
    pass
