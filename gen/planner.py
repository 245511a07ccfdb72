# Chapters 12-14: the planner, its validation against published runs, and the worked 7B fine-tuning plan.
from distlab.site import Page

with Page("12-planner.md") as page:
    page.run("planner")

with Page("13-planner-validation.md") as page:
    page.run("planner-validation")

with Page("14-worked-plan-7b.md") as page:
    page.run("worked-plan-7b")
