# Chapter 9: interconnect and the collective cost model.
from distlab.site import Page

with Page("09-interconnect.md") as page:
    pass
