# The two commands of the README: `make run` and `make test`. Both create the
# virtual environment on first use, so a fresh clone needs nothing else.
VENV ?= .venv
PY := $(VENV)/bin/python
# torch's version is requirements.lock's, the pins every install path reads.
TORCH_VERSION ?= $(shell sed -n 's/^torch==\([^ ]*\).*/\1/p' requirements.lock)
STAMP := $(VENV)/.installed-stamp
# How many packages requirements.lock pins (set-up names the number).
LOCKED = $(shell grep -c '^[A-Za-z]' requirements.lock)
CORES ?= all
export PATH := $(abspath $(VENV))/bin:$(PATH)
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run test test-fast test-slurm lint bench clean-results setup gpu-check gpu-check-prepare generated-check

setup: $(STAMP)

# Set-up says what each step installs and lets pip show its progress (a line
# per package, a bar per download on a terminal): a busy machine or a slow
# index can take many minutes, and every silent minute looks like a hang.
$(STAMP): pyproject.toml requirements.lock scripts/install-torch.sh
	@echo "setup 1/4: the virtual environment $(VENV) (python3 -m venv)"
	test -x $(PY) || python3 -m venv $(VENV)
	@echo "setup 2/4: torch $(TORCH_VERSION), the largest download: the CPU build where no GPU is found"
	sh scripts/install-torch.sh $(PY) $(TORCH_VERSION)
	@echo "setup 3/4: adloco (editable) with its extras dev, data, workflow: up to $(LOCKED) packages pinned by requirements.lock, among them transformers, snakemake, dvc, pandas, matplotlib; pip names each one it collects, then may be quiet for minutes while it installs them"
	$(PY) -m pip install --progress-bar on -c requirements.lock -e '.[dev,data,workflow]'
	@echo "setup 4/4: checking that adloco, torch, transformers and snakemake import"
	$(PY) -c "import adloco, torch, transformers, snakemake"
	touch $@
	@echo "setup: done; $(VENV) is ready"

run: $(STAMP)
	snakemake --cores $(CORES)

# The suite on up to 4 processes, one per core (pytest-xdist; each test file stays
# on one process, so a module's fixture runs once): 2 on the 2-core CI machine.
# `make test TEST_WORKERS=0` runs it in this process alone.
TEST_WORKERS ?= auto
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --maxprocesses 4 --dist loadfile
# The fast tier leaves out the tests marked for what they run (pyproject.toml's
# markers): end-to-end pipelines, torchrun ranks, processes killed and resumed,
# virtual environments built, the GPU check's quick form, snakemake and dvc, and
# the tests of two seconds or more (heavy: whole reports drawn, child processes).
FAST := not slow and not slurm and not torchrun and not kill_resume and not env_build \
	and not gpu_check and not workflow_cli and not heavy

test: $(STAMP)
	$(PYTEST)

# Every module's unit tests in under 2 minutes (docs/workflow.md, Tests).
test-fast: $(STAMP)
	$(PYTEST) -m "$(FAST)"

# The SLURM profile on a real one-node SLURM started for the tests (as root; it
# installs Debian's Slurm and munge when missing): tests/workflow/test_slurm_real.py.
test-slurm: $(STAMP)
	ADLOCO_SLURM_TESTS=1 $(PY) -m pytest -q -m slurm

lint: $(STAMP)
	ruff check src tests benchmarks scripts workflow/lib examples
	snakemake --lint

# The files generated from a source (the configuration schema, dvc.yaml, params.yaml):
# fails naming each one that is not what its source gives.
generated-check: $(STAMP)
	$(PY) scripts/generated-check.py

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do $(PY) $$b || exit 1; done

# Every CUDA path in one command (docs/gpu-check.md). On the GPU machine, which
# needs no venv: `make gpu-check OUT=gpu-check-out`; here, at toy sizes:
# `make gpu-check DEVICE=cpu`. Beforehand, on a machine with the package index:
# `make gpu-check-prepare` (wheels and data into .gpu-check/).
DEVICE ?= cuda
OUT ?= gpu-check-out
gpu-check:
	scripts/gpu-check.sh --device $(DEVICE) --out $(OUT)

gpu-check-prepare: $(STAMP)
	scripts/gpu-check-prepare.sh

# Everything one experiment computed (results/<experiment>/, logs/<experiment>/,
# as adloco.core.paths lays them out): `make clean-results EXPERIMENT=test`.
EXPERIMENT ?= default
clean-results: $(STAMP)
	$(PY) scripts/clean-results.py "$(EXPERIMENT)"
