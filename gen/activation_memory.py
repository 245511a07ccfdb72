# Chapter 3: activation memory counted on a real block, checkpointing measured, a 7B model's activations.
from distlab.site import Page

with Page("03-activation-memory.md") as page:
    page.run("activation-memory")
    page.run("checkpointing")
    page.run("activations-7b")
