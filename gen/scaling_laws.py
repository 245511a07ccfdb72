# Chapter 11: scaling laws (C = 6ND, Chinchilla's fitted loss and compute-optimal split, budgets).
from distlab.site import Page

with Page("11-scaling-laws.md") as page:
    page.run("scaling-laws")
