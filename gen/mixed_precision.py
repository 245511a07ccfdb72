# Chapter 4: number formats, bf16 vs fp16, loss scaling, master weights and fp8, on a real model's tensors.
from distlab.site import Page

with Page("04-mixed-precision.md") as page:
    page.run("number-formats")
    page.run("bf16-vs-fp16")
    page.run("loss-scaling")
    page.run("master-weights")
    page.run("fp8-scaling")
