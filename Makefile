# soak — burn-in soak benchmark for GPU servers.
#   make soak HOURS=2                 soak every GPU of this server for 2 hours, then report
#   make test                         run the test suite
# Variables: HOURS or MINUTES, BACKEND (auto|nvml|amd|cpu|sim), WORKLOAD (gemm|membw|train|mix),
# OUT (reports folder), ARGS (more `soak run` flags, e.g. ARGS="--until-steady --seed 1").

PYTHON   ?= python3
VENV     ?= .venv
BIN      := $(VENV)/bin
BACKEND  ?= auto
WORKLOAD ?= mix
OUT      ?= reports
ARGS     ?=
# torch for machines without a GPU: the CPU build (the CUDA build is several GB of nothing).
TORCH_CPU       ?= torch==2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
PIP      := $(BIN)/python -m pip --disable-pip-version-check

ifdef MINUTES
LENGTH := --minutes $(MINUTES)
else ifdef HOURS
LENGTH := --hours $(HOURS)
else
LENGTH := --hours 2
endif

.PHONY: install soak demo test test-fast lint format bench gpu-check fuzz clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@if $(BIN)/python -c "import torch" 2>/dev/null; then \
	  echo "install: torch already installed"; \
	elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	  echo "install: NVIDIA GPU found: torch with CUDA"; $(PIP) install "torch>=2.3,<3"; \
	else \
	  echo "install: no NVIDIA GPU found: torch CPU build"; \
	  $(PIP) install --retries 1 --timeout 20 "$(TORCH_CPU)" --extra-index-url $(TORCH_CPU_INDEX); \
	fi
	$(PIP) install -e ".[dev,bmc]"
	touch $@

# A FAIL verdict (exit 1) is the run's answer, not make's error: the recipe ends with soak's
# own last lines (the verdict, the report path) and returns 0; 2 (bad input) and 3 (the run
# could not complete) stay errors. Scripts that need the verdict's exit code call `soak run`.
VERDICT_OK := rc=$$?; if [ $$rc -eq 1 ]; then exit 0; fi; exit $$rc

soak: install
	@$(BIN)/soak run --backend $(BACKEND) --workload $(WORKLOAD) $(LENGTH) --out $(OUT) $(ARGS); \
	  $(VERDICT_OK)

demo: install
	@$(BIN)/soak run --backend sim --workload mix --hours 1 --seed 7 --out $(OUT) \
	  --sim-fault airflow:gpu=3:factor=2.6 --sim-fault ecc:gpu=5:at=1500 $(ARGS); \
	  $(VERDICT_OK)

# Two pytest workers (pytest-xdist), each running whole groups of tests: a module, or one of
# the groups tests/conftest.py names (the reports' shared runs, the reliability tests with
# deadlines). Most tests simulate in one Python process, so the second core pays: two
# subsets of the suite on 2 cores took 396 s and 305 s in one process, 228 s and 256 s in
# two. TEST_JOBS=1 runs one process, TEST_JOBS=auto one worker per CPU.
TEST_JOBS ?= 2
XDIST    := $(if $(filter 1,$(TEST_JOBS)),-p no:xdist,-n $(TEST_JOBS) --dist loadscope)

# The test runs write bytecode (into the ignored __pycache__/) even where the environment
# sets PYTHONDONTWRITEBYTECODE: pytest then keeps each test module's assertion rewrite and
# each module's compiled code, instead of redoing both in every worker of every run (about
# 4 s of the fast tier's collection on 2 cores).
test test-fast fuzz: export PYTHONDONTWRITEBYTECODE :=

test: install
	$(BIN)/pytest -q -rfEs $(XDIST)

# The fast tier: unit and property tests, no soak longer than a few simulated minutes, no
# real processes or services (tests marked slow are left out). Under 40 s on 2 cores.
# No soak processes here: one pytest worker per CPU pays (FAST_JOBS=1 for one process).
FAST_JOBS ?= auto
test-fast: install
	$(BIN)/pytest -q -rs -m "not slow" -p no:cacheprovider \
	  $(if $(filter 1,$(FAST_JOBS)),-p no:xdist,-n $(FAST_JOBS) --dist loadscope)

# The property tests with new random examples each run (make test searches a fixed set).
fuzz: install
	SOAK_FUZZ=1 $(BIN)/pytest -q -rfEs -p no:xdist tests/reliability/test_properties.py \
	  tests/importers/test_fuzz.py

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: install
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

# On a machine with an NVIDIA GPU: a real soak of a few minutes, a telemetry trace, GEMM and
# bandwidth against torch's own best. Writes to $(GPU_CHECK_OUT) (default: gpu-check/).
# GPU_CHECK_ARGS adds options, e.g. "--cold-minutes 11" for a from-cold soak first
# (python tools/gpu_check.py --help).
GPU_CHECK_OUT ?= gpu-check
GPU_CHECK_ARGS ?=
gpu-check:
	PYTHONPATH=. $(PYTHON) tools/gpu_check.py --out $(GPU_CHECK_OUT) $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
