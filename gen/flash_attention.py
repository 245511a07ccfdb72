# Chapter 8: FlashAttention.
from distlab.site import Page

with Page("08-flash-attention.md") as page:
    pass
