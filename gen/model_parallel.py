# Chapter 7: tensor, pipeline, sequence, context and expert parallelism, and the 3D decision rules.
from distlab.site import Page

with Page("07-model-parallel.md") as page:
    page.run("tensor-parallel")
    page.run("sequence-parallel")
    page.run("pipeline-schedules")
    page.run("context-parallel")
    page.run("expert-parallel")
    page.run("parallel-rules")
