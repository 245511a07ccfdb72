# Chapter 3: activation memory and checkpointing.
from distlab.site import Page

with Page("03-activation-memory.md") as page:
    pass
