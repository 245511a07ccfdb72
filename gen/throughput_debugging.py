# Chapter 10: throughput debugging.
from distlab.site import Page

with Page("10-throughput-debugging.md") as page:
    pass
