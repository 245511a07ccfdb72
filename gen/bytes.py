# Chapter 1: where the bytes of an AdamW step go (experiment adamw-bytes).
from distlab.site import Page

with Page("01-where-the-bytes-go.md") as page:
    page.run("adamw-bytes")
