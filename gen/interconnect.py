# Chapter 9: interconnect data, the alpha-beta cost model fitted to real collectives, and placement.
from distlab.site import Page

with Page("09-interconnect.md") as page:
    page.run("placement")
    page.run("collective-fit")
