# Two commands do all the set-up on a fresh machine:
#   make demo   train MiniGPT on Tiny Shakespeare (CPU preset, about 2 minutes) and print a sample
#   make test   run the whole test suite
# While you work: make check (every test that trains at most a few steps, about 3.5 minutes on 2 cores).
# Both create .venv and install tinyformer into it first (torch's CPU build, then the package with the extras
# the README's commands use: the playground's server and Hugging Face, `.[serve,hf]`).

PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
RUN ?= runs/demo

.PHONY: setup demo test check lint clean gpu-check lab notebooks jupyter

setup: $(VENV)/.dev

# The package and what the README's commands use (torch's CPU build first: a bare `torch` would pull a CUDA
# build). `pip install tinyformer` alone trains, samples and draws; a feature whose extra is missing says which.
$(VENV)/.core: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[serve,hf]"
	touch $@

# What the tests need on top: pytest, ruff, tensorboard, playwright (the `dev` extra: `all` and those).
$(VENV)/.dev: $(VENV)/.core
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@

demo: $(VENV)/.core
	rm -rf $(RUN)
	$(BIN)/tinyformer train gpt --config gpt_cpu_quick --out $(RUN)
	$(BIN)/tinyformer sample $(RUN) --prompt "ROMEO:" --tokens 500 --temperature 0.8 --top-k 40 --seed 1

# One worker per core, one torch thread each (tests/conftest.py); the tests that share the CI-size studies run
# on one of them. `python -m pytest` alone runs the same tests in one process.
WORKERS ?= -n auto --dist loadgroup

test: $(VENV)/.dev
	$(BIN)/python -m pytest -q $(WORKERS)

# The fast tier: what `slow` marks (training beyond a few steps, the studies, the lab's build) is left out.
check: $(VENV)/.dev
	$(BIN)/python -m pytest -q $(WORKERS) -m "not slow"

# The lab guide (docs/lab): pages, figures and facts.json from the reports under runs/.
#   make lab          fill the pages from what runs/ holds (a source it lacks keeps the committed values)
#   make lab TRAIN=1  first make every source runs/ lacks: a plan with minutes estimated for this machine, then
#                     the sources side by side, one per core, with the time left (interrupted: run it again)
#   make lab VERIFY=1 first check every source whose code changed since it was made by its behaviour: its CI-size
#                     build made again here and at its stamped commit (at most 10 minutes on 2 cores); a source
#                     whose build is bit-identical says "behaviour unchanged through" HEAD, another says what moved
#   make lab PLAN=1   print that plan and stop;  make lab ONLY=experiments/ablation  make that one source
#   make lab QUICK=1  every source at CI size under runs/lab-quick, pages to runs/lab-quick/docs
#   make lab ONLY=experiments/speedrun NANOGPT=~/nanoGPT  a source beyond the hour (nanoGPT beside ours); so is
#                     each budget of the budgets study: ONLY=experiments/budgets/10min (1min, 3min, 10min, 30min)
lab: $(VENV)/.dev
ifneq ($(filter 1 yes true,$(VERIFY)),)
	$(BIN)/tinyformer lab verify $(foreach s,$(ONLY),--only $(s))
else
	$(if $(NANOGPT),TINYFORMER_NANOGPT=$(NANOGPT) )$(BIN)/tinyformer lab build $(if $(filter 1 yes true,$(TRAIN)),--train) $(if $(filter 1 yes true,$(QUICK)),--quick) \
		$(if $(filter 1 yes true,$(PLAN)),--train --plan) $(foreach s,$(ONLY),--only $(s))
endif

# The guide's notebooks (notebooks/{en,zh}): made from the guide's sources, committed without outputs.
notebooks: $(VENV)/.core
	$(BIN)/tinyformer lab notebooks

# Jupyter Lab on the notebooks, after `make demo`: adds the `notebook` extra to .venv (TINYFORMER_SIZE=ci|laptop|full)
$(VENV)/.notebook: $(VENV)/.core
	$(BIN)/python -m pip install --quiet -e ".[serve,hf,notebook]"
	touch $@

jupyter: $(VENV)/.notebook  # served from the repository's root: the notebooks show the guide's figures from docs/
	$(BIN)/jupyter lab --ServerApp.root_dir=. --LabApp.default_url=/lab/tree/notebooks $(if $(filter 0,$(shell id -u)),--allow-root)

# Every GPU figure the README promises, in one go on a lent GPU (under 8 minutes): runs/gpu_check/gpu_check.json
gpu-check: $(VENV)/.core
	$(BIN)/python scripts/gpu_check.py --out runs/gpu_check

lint: setup
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
