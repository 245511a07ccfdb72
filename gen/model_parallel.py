# Chapter 7: tensor, pipeline, sequence, context and expert parallelism.
from distlab.site import Page

with Page("07-model-parallel.md") as page:
    pass
