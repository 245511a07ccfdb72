# Every page of docs/: the experiments its {{ placeholders }} name are run (from the cache when unchanged) and
# the placeholders filled in. The placeholders are the only list of what a page needs (distlab/core/site.py).
from distlab.core.site import build_pages

build_pages()
