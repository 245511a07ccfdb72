# Chapter 4: number formats, loss scaling, master weights, fp8.
from distlab.site import Page

with Page("04-mixed-precision.md") as page:
    pass
