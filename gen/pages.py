# Every page of docs/: the experiments its {{ placeholders }} name are run (from the cache when unchanged) and
# the placeholders filled in. The placeholders are the only list of what a page needs (distlab/site.py).
from distlab.site import build_pages

build_pages()
