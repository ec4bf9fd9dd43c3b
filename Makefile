# layoutlab: every target sets up what it needs on a fresh Debian machine
# (no AWS account, no Docker). `make demo` and `make test` are the two commands
# README.md promises.

# One Python for local and cloud: the Lambda runtime's (python3.12 on Amazon Linux 2023),
# written once in cdk/layoutlab_cdk/config.py. The venv, the layer, the function asset's C
# module and the local run of every task use it. PYTHON may name one; otherwise the first
# python3.12 that runs is taken from PATH, pyenv's versions, /usr/local/bin and /usr/bin.
RUNTIME_PYTHON := $(shell sed -n 's/^PYTHON_RUNTIME = "\([0-9.]*\)".*/\1/p' cdk/layoutlab_cdk/config.py)
comma := ,
ifndef PYTHON
PYTHON := $(shell for candidate in python$(RUNTIME_PYTHON) \
	  $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$(RUNTIME_PYTHON).*/bin/python$(RUNTIME_PYTHON) 2>/dev/null | sort -V -r) \
	  /usr/local/bin/python$(RUNTIME_PYTHON) /usr/bin/python$(RUNTIME_PYTHON); do \
	  "$$candidate" -c 'import sys, venv; sys.exit(sys.version_info[:2] != ($(subst .,$(comma),$(RUNTIME_PYTHON))))' \
	    >/dev/null 2>&1 && { command -v "$$candidate"; break; }; done)
endif
VENV   := .venv
PY     := $(VENV)/bin/python
EXTRAS ?= dev,cdk
# The installer: uv, at the version pyproject.toml's [tool.uv] required-version names, bootstrapped
# with pip into a tools venv of its own, kept per user and per uv version (every clone shares it:
# a second clone's install does not bootstrap again). Every Python package the project uses comes
# from its lock, uv.lock (make lock / make upgrade rewrite it). uv reads no pip configuration: it
# uses PyPI, the index the lock names, and never downloads a Python of its own.
UV_VERSION := $(shell sed -n 's/^required-version = "==\([0-9.]*\)".*/\1/p' pyproject.toml)
TOOLS  ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/layoutlab/uv-$(UV_VERSION)
export UV := $(TOOLS)/bin/uv
export UV_PYTHON_DOWNLOADS := never
# TLS roots from the system's store, as pip and curl here use them (a machine behind an inspecting
# proxy trusts its CA there; uv's built-in roots would not)
export UV_SYSTEM_CERTS := 1
export UV_PROJECT_ENVIRONMENT := $(VENV)
ENV    ?= dev

export AWS_EC2_METADATA_DISABLED := true
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20

.PHONY: help python uv lock upgrade venv artifacts layer sysdeps demo test test-unit test-integration test-infra test-invariants bench clean bench-repack \
        bench-rechunk bench-rechunk-venv bench-cubed-venv bench-ranged-get bench-access bench-load test-load cdk-cli layer synth deploy destroy bench-real

help:
	@echo "make demo   - set up .venv, build the deployment artifacts, run the local pipeline from them (no AWS account needed)"
	@echo "make test   - set up .venv and run the whole test suite"
	@echo "make test-unit | test-integration | test-infra - one level of the suite"
	@echo "make artifacts - build the Lambda layer and function asset for Python $(RUNTIME_PYTHON) and check them against the runtime"
	@echo "make synth ENV=dev   - build the artifacts, synthesize the CDK app into cdk.out/ (offline, no credentials)"
	@echo "make preflight ENV=dev - with AWS credentials: what in cdk.json this account cannot run (quotas, bootstrap)"
	@echo "make deploy ENV=dev  - cdk deploy --all -c env=ENV (needs AWS credentials and a bootstrapped account)"
	@echo "make destroy ENV=dev - cdk destroy --all -c env=ENV"
	@echo "make lock   - after editing pyproject.toml's dependencies: rewrite uv.lock, keeping every other version"
	@echo "make upgrade - move every dependency to its newest allowed version (rewrites uv.lock), then reinstall .venv"
	@echo "make clean  - remove .venv and generated files"

# Debian tools the project calls: h5repack/h5stat (the reference tool and oracle),
# ncdump (to check NetCDF-4 files stay NetCDF-4 files) and chromium (headless: the test
# that the HTML report's figures decode and draw in a real browser).
sysdeps:
	@missing=""; \
	command -v h5repack >/dev/null 2>&1 || missing="$$missing hdf5-tools"; \
	command -v ncdump   >/dev/null 2>&1 || missing="$$missing netcdf-bin"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

python:
	@if [ -z "$(PYTHON)" ]; then \
	  echo "layoutlab needs CPython $(RUNTIME_PYTHON), the Lambda runtime's Python, and found none"; \
	  echo "(looked for python$(RUNTIME_PYTHON) on PATH, in pyenv's versions, /usr/local/bin and /usr/bin)."; \
	  echo "Install it (e.g. 'pyenv install $(RUNTIME_PYTHON)', or your distribution's python$(RUNTIME_PYTHON) with"; \
	  echo "its venv module) or name one: make PYTHON=/path/to/python$(RUNTIME_PYTHON) ..."; \
	  exit 1; \
	fi

$(TOOLS)/.installed: | python
	@test -n "$(UV_VERSION)" || { echo "pyproject.toml: [tool.uv] required-version = \"==X.Y.Z\" is missing"; exit 1; }
	test -x $(TOOLS)/bin/python || $(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install -q --disable-pip-version-check 'uv==$(UV_VERSION)'
	touch $@

uv: $(TOOLS)/.installed

# The venv is exactly the lock (--locked: a pyproject.toml changed since the lock was written is an
# error that says to run `make lock`, never a silent new resolution). The editable install also
# compiles repack's C code, functions/layoutlab/convert/_fastcopy.c, in place; and the package is
# byte-compiled as a regular install does: without .pyc files every command would compile its
# modules again at each start, ~15 ms for `layoutlab repack`. So are the dependencies
# (--compile-bytecode): uv installs none by default and PYTHONDONTWRITEBYTECODE=1 keeps Python
# from caching them, so every `layoutlab repack` compiled numpy's and h5py's 97 modules from source
# (cProfile: builtins.compile, 100 calls, the largest item of a small file's repack; issue 37).
# A .venv of another Python (an older checkout's 3.11) is replaced.
$(VENV)/.installed-$(RUNTIME_PYTHON)-$(EXTRAS): uv.lock pyproject.toml $(wildcard functions/layoutlab/convert/*.c functions/layoutlab/convert/*.h) | python uv
	@if [ -x $(PY) ] && ! $(PY) -c 'import sys; sys.exit(sys.version_info[:2] != ($(subst .,$(comma),$(RUNTIME_PYTHON))))'; then \
	  echo "replacing $(VENV) ($$($(PY) -V)): the project runs on Python $(RUNTIME_PYTHON)"; rm -rf $(VENV); fi
	$(UV) sync --locked --quiet --compile-bytecode --python $(PYTHON) $(foreach extra,$(subst $(comma), ,$(EXTRAS)),--extra $(extra))
	$(PY) -m compileall -q functions/layoutlab
	touch $@

lock: uv
	$(UV) lock --python $(PYTHON)

upgrade: uv
	$(UV) lock --upgrade --python $(PYTHON)
	$(MAKE) venv

venv: $(VENV)/.installed-$(RUNTIME_PYTHON)-$(EXTRAS)

# The deployment artifacts (layers/build/): the dependency layer and the function asset, built
# for the runtime and checked against it (glibc symbol versions, wheel tags). The local run
# executes them, as Lambda and the Fargate image do.
artifacts: venv
	$(PY) layers/build_layer.py --quiet
	$(PY) layers/check_artifacts.py

layer: artifacts

demo: sysdeps venv artifacts
	$(VENV)/bin/layoutlab demo

# The suite on every core (pytest-xdist, one worker per test file so module fixtures are made once;
# the corpus-wide files, listed in tests/conftest.py, are dealt test by test),
# then the tests that assert on measured time alone, so no other test's work lengthens their runs.
# Both parts always run; the target fails if either does. The slowest tests are listed, so a log says
# where the suite's time goes.
TEST_WORKERS ?= auto
test: sysdeps venv artifacts
	@status=0; \
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not timing" --durations=25 tests || status=1; \
	$(PY) -m pytest -q -m timing --durations=10 tests || status=1; \
	exit $$status

test-unit: venv
	$(PY) -m pytest -q tests/unit

test-integration: sysdeps venv artifacts
	$(PY) -m pytest -q tests/integration

test-infra: venv artifacts
	$(PY) -m pytest -q tests/infra

# The instrument's invariants over every reader x variant kind x pattern (~160 cold cases at two
# latencies; `make test` runs every reader x variant kind once, with every pattern among them).
test-invariants: sysdeps venv artifacts
	LAYOUTLAB_INVARIANTS=full $(PY) -m pytest -q tests/integration/test_bench_instrument_invariants.py

# rechunker 0.5.x needs zarr < 3, so the rechunk benchmark runs it from a venv of its own.
RECHUNKER_VENV ?= /tmp/zarr/rechunker-venv

$(RECHUNKER_VENV)/bin/rechunker-ready:
	$(PYTHON) -m venv $(RECHUNKER_VENV)
	$(RECHUNKER_VENV)/bin/pip install -q rechunker==0.5.4 'zarr<3' dask xarray h5netcdf h5py numcodecs
	touch $@

bench-rechunk-venv: $(RECHUNKER_VENV)/bin/rechunker-ready

# Cubed (through cubed-xarray) is a rival the rechunk benchmark measures, not a dependency of
# the package shipped to Lambda: it gets a venv of its own too, pinned to the versions measured.
CUBED_VENV ?= /tmp/zarr/cubed-venv

$(CUBED_VENV)/bin/cubed-ready: | python
	$(PYTHON) -m venv $(CUBED_VENV)
	$(CUBED_VENV)/bin/pip install -q cubed==0.28.0 cubed-xarray==0.0.9 'zarr>=3' xarray h5netcdf h5py numcodecs
	touch $@

bench-cubed-venv: $(CUBED_VENV)/bin/cubed-ready

bench-rechunk: venv bench-rechunk-venv bench-cubed-venv
	$(PY) benchmarks/bench_rechunk.py --rechunker-python $(RECHUNKER_VENV)/bin/python \
	  --cubed-python $(CUBED_VENV)/bin/python --seed-grid

# --- deploy (issue 6): the CDK CLI is a pinned npm dev dependency (package-lock.json);
# the app itself is Python (cdk/app.py, run by the CLI through cdk.json).
CDK := node_modules/.bin/cdk

node_modules/.installed: package.json package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "npm not found: install Node.js 20+ (aws-cdk-lib runs on it too)"; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

cdk-cli: node_modules/.installed

synth: venv cdk-cli artifacts
	$(CDK) synth -c env=$(ENV) --quiet
	@echo "templates in cdk.out/ (layoutlab-$(ENV)-data|compute|pipeline|observability)"

deploy: venv cdk-cli artifacts
	$(CDK) deploy --all -c env=$(ENV)

destroy: venv cdk-cli artifacts
	$(CDK) destroy --all -c env=$(ENV)

# layoutlab repack vs h5repack on ~1 GB GEOS-like and ATL03-like inputs (+ the 4 GB memory
# check); figures go to benchmarks/results/bench_repack.json and README.
bench-repack: sysdeps venv
	$(PY) benchmarks/bench_repack.py --workdir /tmp/layoutlab-bench --repeat 3 --memory-check-gb 4

# layoutlab repack on the shared corpus's real granules (../shared/corpus: products/*, ATL06, GPM) against
# h5repack and h5repack + h5diff, one file and 20 copies in one run (issue 37); figures go to
# benchmarks/results/bench_real-<date>.json and docs/benchmarks.md. BENCH_REAL_ARGS="--repeat 3 --only ATL06" for less.
bench-real: sysdeps venv
	$(PY) benchmarks/bench_real.py $(BENCH_REAL_ARGS)

clean:
	rm -rf $(VENV) cdk.out build *.egg-info functions/*.egg-info .pytest_cache demo-output layers/build node_modules

# Issue 4's measurements of the benchmark instrument (see README, section bench).
bench-ranged-get: venv
	$(PY) benchmarks/bench_ranged_get.py

# Load (issue #8): 50 uploads at once through the local pipeline (a few minutes).
test-load: sysdeps venv
	LAYOUTLAB_LOAD_UPLOADS=50 $(PY) -m pytest -q -s tests/integration/test_load_local.py

bench-load: sysdeps venv
	$(PY) benchmarks/bench_load.py --uploads 50 --json benchmarks/results/bench_load.json

bench-access: sysdeps venv
	$(PY) benchmarks/bench_access.py --json benchmarks/results/bench_access_run1.json
	$(PY) benchmarks/bench_access.py --skip atl03 --geos-shape 5136,181,288 --json benchmarks/results/bench_access_run2.json

# Issue 16: NSIDC's ATL03 table reproduced in shape (~1 GB and ~7 GB granules, ~17 min; a size the
# local cloud cannot hold in memory runs with its objects on disk: ~35 GB free for 7 GB), and zarr's
# shard coalescing on a GEOS-like grid.
.PHONY: bench-nsidc bench-grid-shards
bench-nsidc: sysdeps venv
	$(PY) benchmarks/bench_nsidc_table.py --json benchmarks/results/nsidc_table.json

bench-grid-shards: sysdeps venv
	$(PY) benchmarks/bench_grid_shards.py --json benchmarks/results/grid_shards.json

# Preflight (issue 14): what in cdk.json's environment ENV the AWS account of your credentials
# cannot run (Lambda memory and concurrency, Fargate vCPU quota, CDK bootstrap). Read-only.
# Exit 1: something cannot run; 2: doctor cannot check (e.g. no credentials).
.PHONY: preflight
preflight: venv
	$(VENV)/bin/layoutlab doctor --env $(ENV)
