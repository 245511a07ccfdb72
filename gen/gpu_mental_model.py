# Chapter 2: the GPU mental model (hardware data, roofline, tensor-core dtypes, FLOPs per token and MFU).
from distlab.site import Page

with Page("02-gpu-mental-model.md") as page:
    page.run("gpu-specs")
    page.run("roofline")
    page.run("matmul-dtypes")
    page.run("flop-count")
