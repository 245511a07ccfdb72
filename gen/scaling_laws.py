# Chapter 11: scaling laws.
from distlab.site import Page

with Page("11-scaling-laws.md") as page:
    pass
