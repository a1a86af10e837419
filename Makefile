# Thin wrappers over the `covbook` command. `make book` and `make test` set everything up.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PROFILE ?= quick
DEVICE  ?= auto
JOBS    ?= 2
STAMP  := $(VENV)/.covbook-installed
# `make test` runs each stage through .ci/stage.py (wall and CPU seconds per stage, a table at the end)
STAGE  := $(PYTHON) .ci/stage.py
stage   = @$(STAGE) $(1) -- $(2) || { $(STAGE) --summary; exit 1; }

.PHONY: setup book pdf test unit notebooks-smoke lint lint-notebooks format bench bench-sweep clean distclean

setup: $(STAMP)

# torch first, pinned (an unpinned torch pulls the newest CUDA build), then the package with its book and dev
# extras; both by uv, which installs several times faster than pip (pip when uv cannot be installed or fails).
# The venv is made without pip (ensurepip takes seconds): the host's pip installs uv into it (pip --python), the
# venv's own pip, bootstrapped by ensurepip, where the host has none; uv adds pip at the end, uncompiled, for
# `.venv/bin/pip`. uv does not read pip's configuration, so torch's install is handed the wheel folders of PIP_FIND_LINKS, where a
# machine keeps wheels on disk. --compile-bytecode as pip does, for where PYTHONDONTWRITEBYTECODE is set and
# every kernel would otherwise compile what it imports; then the package's own modules, and the Jupyter kernel
# `covbook` the notebooks run on. Which torch build comes depends on the index: on Linux PyPI serves the CUDA
# build (several GB); for the CPU build pass PyTorch's CPU index,
#   make setup TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# (or a CPU wheel in a PIP_FIND_LINKS folder).
TORCH_INDEX_URL ?=
TORCH_INDEX := $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL))
TORCH_LINKS := $(foreach d,$(PIP_FIND_LINKS),--find-links $(d))
UV_INSTALL = $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python
EXTRAS := .[book,dev]
# pip install $(1) with the venv's own pip, bootstrapped where the venv has none
venv_pip = { { $(BIN)/python -m pip --version >/dev/null 2>&1 || $(BIN)/python -m ensurepip >/dev/null; } && \
	$(BIN)/python -m pip install --quiet $(1); }
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip --python $(BIN)/python install --quiet uv 2>/dev/null || $(call venv_pip,uv) || true
	$(UV_INSTALL) "torch==2.13.0" $(TORCH_INDEX) $(TORCH_LINKS) || $(call venv_pip,"torch==2.13.0" $(TORCH_INDEX))
	$(UV_INSTALL) -e "$(EXTRAS)" || $(call venv_pip,-e "$(EXTRAS)")
	$(BIN)/python -m pip --version >/dev/null 2>&1 || $(BIN)/uv pip install --quiet --python $(BIN)/python pip
	$(BIN)/python -m compileall -q src >/dev/null
	$(BIN)/python -m ipykernel install --sys-prefix --name covbook --display-name "Python 3 (covbook)" >/dev/null
	touch $(STAMP)

book: setup
	$(BIN)/covbook run --profile $(PROFILE) --device $(DEVICE) --jobs $(JOBS) || [ $$? -eq 1 ]  # a failed claim: build the book, then fail at check
	$(BIN)/covbook build
	$(BIN)/covbook check > /dev/null

# the PDF edition of the built book: headless Chromium prints every page (covbook/book/pdf.py)
pdf: book
	$(BIN)/python -m covbook.book.pdf

# stages: setup, lint, then every test in one pytest-xdist session; each stage prints its time, then a
# table. The slow tests' two pipelines (the notebooks at smoke with their claims, the book built from them,
# the browser and PDF tests; the rehearsal of the full profile, one kernel at a time) each stay on one worker
# and, as the largest units of work, start first, then the other slow tests (tests/conftest.py, --dist
# loadgroup); the fast tests fill the other workers and the pipelines' waits (kernel start-ups, Chromium).
# One worker more than there are cores, since those waits leave a core idle. `make unit` runs the fast tests alone, in seconds.
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print((os.cpu_count() or 1) + 1)")
test:
	@$(STAGE) --reset
	$(call stage,setup,$(MAKE) --no-print-directory setup)
	$(call stage,ruff,$(BIN)/ruff check src tests benchmarks studies)
	$(call stage,lint-notebooks,$(MAKE) --no-print-directory lint-notebooks)
	$(call stage,actionlint,$(BIN)/actionlint)
	$(call stage,tests,$(BIN)/python -m pytest -p no:cacheprovider -rs -n $(TEST_WORKERS) --dist loadgroup)
	@$(STAGE) --summary

# the fast tests only (no notebook executed, no book built), on one pytest-xdist worker per core: seconds
unit: setup
	$(BIN)/python -m pytest -m "not notebooks and not book" -n auto

# ruff on src, tests, benchmarks (line length 120) and on the notebooks' code cells (88: the book's page width)
lint: setup
	$(BIN)/ruff check src tests benchmarks studies
	@$(MAKE) --no-print-directory lint-notebooks
	$(BIN)/actionlint

# the chapters as jupytext reads them, copied as .ipynb to a folder under .covbook/, where ruff's notebook mode
# (a cell's trailing `;` kept, imports atop any cell) checks that the code is formatted (the diff), then formats
# the copies and lints them: what is left after `make format`
NB = --line-length 88
lint-notebooks:
	@mkdir -p .covbook; d=$$(mktemp -d .covbook/lint-notebooks.XXXXXX) && trap 'rm -rf "$$d"' EXIT && \
	$(BIN)/jupytext --quiet --to "../$$d//ipynb" notebooks/[0-9][0-9]_*.md && \
	{ $(BIN)/ruff format $(NB) --quiet --diff "$$d"/*.ipynb; f=$$?; $(BIN)/ruff format $(NB) --quiet "$$d"/*.ipynb && \
	  $(BIN)/ruff check $(NB) --quiet --output-format concise "$$d"/*.ipynb && [ $$f -eq 0 ]; }

# ruff check --fix + ruff format on the notebooks' code cells, written back into notebooks/NN_*.md by jupytext
# (in its form of the cells' YAML metadata), then what is left to fix by hand
format: setup
	$(BIN)/jupytext --quiet --pipe-fmt ipynb --pipe "$(BIN)/ruff check $(NB) --fix --exit-zero --silent {}" \
		--pipe "$(BIN)/ruff format $(NB) --quiet {}" notebooks/[0-9][0-9]_*.md
	@$(MAKE) --no-print-directory lint-notebooks

bench: setup
	$(BIN)/python benchmarks/bench_attention.py

# notebook jobs on the local pool and on Dask local clusters of 1 and 2 workers (throughput, overhead per job)
bench-sweep: setup
	$(BIN)/python benchmarks/bench_sweep.py

clean:
	-$(BIN)/covbook clean

distclean: clean
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
