# The live memory calculator page.
from distlab.site import Page

with Page("calculator.md") as page:
    pass
