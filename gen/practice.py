# The practice questions, one page each; each runs the experiments its worked answer quotes.
from distlab.site import Page

with Page("practice/index.md") as page:
    pass

with Page("practice/01-will-13b-fit.md") as page:
    page.run("practice-13b")

with Page("practice/02-70b-on-64-gpus.md") as page:
    page.run("practice-70b")

with Page("practice/03-zero3-vs-tp.md") as page:
    page.run("practice-zero3-vs-tp")

with Page("practice/04-why-flash-attention.md") as page:
    page.run("flash-attention-flops")
    page.run("practice-flash")

with Page("practice/05-diagnose-28-mfu.md") as page:
    page.run("practice-mfu-budget")

with Page("practice/06-checkpoint-interval.md") as page:
    page.run("practice-checkpoint")
