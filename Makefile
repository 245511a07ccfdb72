# Two commands for a newcomer: `make serve` (build and serve the site) and `make test` (the whole suite).
# Both create .venv on first use and are fast when nothing changed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PORT   ?= 8000
export NO_MKDOCS_2_WARNING := 1
export DISABLE_MKDOCS_2_WARNING := true

.PHONY: setup site serve test lint experiments gpu-results clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU build of torch that lies on disk, installed explicitly so no CUDA build is pulled.
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)

site: setup                ## run every experiment (cached) and build the site into site/
	$(BIN)/mkdocs build --strict

serve: setup               ## build, then serve on http://127.0.0.1:8000 with live reload
	$(BIN)/mkdocs serve --strict -a 127.0.0.1:$(PORT)

test: setup                ## lint, then the whole suite, including a strict site build
	$(BIN)/ruff check distlab gen tests
	$(BIN)/python -m pytest

experiments: setup         ## run every experiment with progress, print claims
	$(BIN)/distlab run --all

gpu-results: setup         ## on a GPU machine: measure every CUDA experiment and store it in results/
	$(BIN)/distlab run --all --device cuda --store

clean:
	rm -rf site .cache
