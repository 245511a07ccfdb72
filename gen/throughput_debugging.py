# Chapter 10: throughput debugging, in the order a good engineer works: profile, input, overlap, stragglers,
# failures (checkpoint interval), preemptions (elastic/spot), then the checklist.
from distlab.site import Page

with Page("10-throughput-debugging.md") as page:
    page.run("profile-step")
    page.run("dataloader-starvation")
    page.run("placement")
    page.run("ddp-buckets")  # chapter 5's measured bucket timeline: exposed vs hidden communication
    page.run("stragglers")
    page.run("checkpoint-interval")
    page.run("elastic-spot")
