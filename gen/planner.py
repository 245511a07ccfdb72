# Chapters 12-14: the planner, its validation and the worked 7B plan.
from distlab.site import Page

with Page("12-planner.md") as page:
    pass
