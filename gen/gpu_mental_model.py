# Chapter 2: the GPU mental model (roofline, tensor cores, MFU).
from distlab.site import Page

with Page("02-gpu-mental-model.md") as page:
    pass
