# Two commands for a newcomer: `make serve` (build and serve the site) and `make test` (the whole suite).
# Both create .venv on first use and are fast when nothing changed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PORT   ?= 8000
export NO_MKDOCS_2_WARNING := 1
export DISABLE_MKDOCS_2_WARNING := true
# The site's math is rendered by KaTeX served from the site itself (no CDN): installed from the npm
# registry into the venv, copied into each build by gen/assets.py.
KATEX_VERSION := 0.19.1
KATEX_DIR     := $(VENV)/share/katex
KATEX_STAMP   := $(KATEX_DIR)/.katex-$(KATEX_VERSION)
# The Plan page runs distlab's planner in the reader's browser on Pyodide (CPython compiled to WebAssembly): its
# core from the npm registry, pinned, into the venv, and its standard library compiled to bytecode once by
# Pyodide itself under Node (gen/pyodide_compile.mjs: the page then starts in half the time); gen/assets.py
# copies what the site serves.
PYODIDE_VERSION := 314.0.7
PYODIDE_DIR     := $(VENV)/share/pyodide
PYODIDE_STAMP   := $(PYODIDE_DIR)/.pyodide-$(PYODIDE_VERSION)
PYODIDE_FILES   := pyodide.mjs pyodide.asm.mjs pyodide.asm.wasm pyodide-lock.json python_stdlib.zip package.json
# The browser tests drive Debian's chromium through Playwright (never a Playwright browser download).
CHROMIUM      := /usr/bin/chromium

.PHONY: setup site serve test browser lint experiments gpu-results stress stress-test guard-audit clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU build of torch that lies on disk, installed explicitly so no CUDA build is pulled.
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

$(KATEX_STAMP): | $(STAMP)
	rm -rf $(KATEX_DIR) && mkdir -p $(KATEX_DIR)
	cd $(KATEX_DIR) && npm pack --silent katex@$(KATEX_VERSION) > /dev/null \
		&& tar -xzf katex-$(KATEX_VERSION).tgz --strip-components=1 package/dist package/LICENSE \
		&& mv dist/* . && rmdir dist && rm katex-$(KATEX_VERSION).tgz
	touch $(KATEX_STAMP)

$(PYODIDE_STAMP): gen/pyodide_compile.mjs | $(STAMP)
	rm -rf $(PYODIDE_DIR) && mkdir -p $(PYODIDE_DIR)
	cd $(PYODIDE_DIR) && npm pack --silent pyodide@$(PYODIDE_VERSION) > /dev/null \
		&& tar -xzf pyodide-$(PYODIDE_VERSION).tgz --strip-components=1 $(addprefix package/,$(PYODIDE_FILES)) \
		&& rm pyodide-$(PYODIDE_VERSION).tgz
	node gen/pyodide_compile.mjs stdlib $(PYODIDE_DIR) $(PYODIDE_DIR)/python_stdlib.zip $(PYODIDE_DIR)/python_stdlib.pyc.zip
	touch $(PYODIDE_STAMP)

setup: $(STAMP) $(KATEX_STAMP) $(PYODIDE_STAMP)

browser:                   ## Debian's chromium for the browser tests; nothing to do when it is installed
	@test -x $(CHROMIUM) || { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium; }

site: setup                ## run every experiment (cached) and build the site into site/
	$(BIN)/mkdocs build --strict

serve: setup               ## build, then serve on http://127.0.0.1:8000 with live reload
	$(BIN)/mkdocs serve --strict -a 127.0.0.1:$(PORT)

test: setup browser        ## lint and type-check, then the whole suite: a strict site build, browser tests in chromium
	$(BIN)/ruff check distlab gen tests
	$(BIN)/ruff format --check distlab gen tests
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest

experiments: setup         ## run every experiment with progress, print claims
	$(BIN)/distlab run --all

gpu-results:               ## on a GPU machine, with the python that has CUDA torch (no venv, no network)
	PYTHONPATH=$(CURDIR) $(PYTHON) -m distlab run --all --device cuda --store --no-cache

# `make stress N=10`: N cold builds in a row, each with an empty result cache, while two CPU hogs (busy shell loops)
# compete for the cores: noise must never fail a build. Prints one line per build (pass/FAIL, seconds, the failing
# claim) and "k of N passed"; exits 1 if any failed. Logs stay in $(STRESS_DIR).
N ?= 10
STRESS_DIR ?= /tmp/distlab-stress
stress: setup
	@rm -rf $(STRESS_DIR) && mkdir -p $(STRESS_DIR); \
	hogs=""; for i in 1 2; do sh -c 'while :; do :; done' & hogs="$$hogs $$!"; done; \
	trap 'kill $$hogs 2>/dev/null' EXIT; trap 'exit 130' INT TERM; \
	passed=0; \
	for i in $$(seq 1 $(N)); do \
		d=$(STRESS_DIR)/build$$i; mkdir -p $$d; start=$$(date +%s); \
		if DISTLAB_CACHE=$$d/cache $(BIN)/mkdocs build --strict -d $$d/site > $$d/log 2>&1; then \
			passed=$$((passed + 1)); echo "build $$i/$(N): passed in $$(( $$(date +%s) - start )) s"; \
		else \
			echo "build $$i/$(N): FAILED in $$(( $$(date +%s) - start )) s: $$(grep -m1 'page .*claim\|Error' $$d/log)"; \
		fi; \
		rm -rf $$d/site $$d/cache; \
	done; \
	echo "stress: $$passed of $(N) cold builds passed with two CPU hogs running (logs in $(STRESS_DIR))"; \
	test $$passed -eq $(N)

# `make stress-test N=3`: the whole pytest suite N times in a row while the same two CPU hogs compete for the cores:
# no test may need an idle machine. Prints one line per run (pass/FAIL, seconds, the failing tests) and "k of N
# passed"; exits 1 if any run failed. Logs stay in $(STRESS_DIR)/tests.
stress-test: setup browser
	@rm -rf $(STRESS_DIR)/tests && mkdir -p $(STRESS_DIR)/tests; \
	hogs=""; for i in 1 2; do sh -c 'while :; do :; done' & hogs="$$hogs $$!"; done; \
	trap 'kill $$hogs 2>/dev/null' EXIT; trap 'exit 130' INT TERM; \
	passed=0; \
	for i in $$(seq 1 $(N)); do \
		log=$(STRESS_DIR)/tests/run$$i.log; start=$$(date +%s); \
		if $(BIN)/python -m pytest -q -p no:cacheprovider > $$log 2>&1; then \
			passed=$$((passed + 1)); echo "run $$i/$(N): passed in $$(( $$(date +%s) - start )) s: $$(tail -n 1 $$log)"; \
		else \
			echo "run $$i/$(N): FAILED in $$(( $$(date +%s) - start )) s: $$(tail -n 1 $$log)"; \
			grep -E '^(FAILED|ERROR) ' $$log | sed 's/^/    /'; \
		fi; \
	done; \
	echo "stress-test: $$passed of $(N) runs of the whole suite passed with two CPU hogs running (logs in $(STRESS_DIR)/tests)"; \
	test $$passed -eq $(N)

# `make guard-audit`: every page's numbers traced to realistic perturbations of the data and code its experiments
# use, each alone, run in-process (distlab/core/guard_audit.py); prints each escape and "guard-audit: N/M guarded",
# exits 1 unless N == M. The whole audit is long: run it on a schedule (CI runs it on what a branch changed,
# tests/core/test_guard_audit.py). One page or file: `make guard-audit ARGS="--page 07-model-parallel.md"`.
ARGS ?=
guard-audit: setup
	$(BIN)/python -m distlab.core.guard_audit $(ARGS)

clean:
	rm -rf site .cache
