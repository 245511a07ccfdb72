# The practice questions, one page each.
from distlab.site import Page

with Page("practice/index.md") as page:
    pass
