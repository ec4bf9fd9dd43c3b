# layoutlab: every target sets up what it needs on a fresh Debian machine
# (Python 3.11, no AWS account, no Docker). `make demo` and `make test` are the
# two commands README.md promises.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
EXTRAS ?= dev,cdk
ENV    ?= dev

export AWS_EC2_METADATA_DISABLED := true
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20

.PHONY: help venv sysdeps demo test test-unit test-integration test-infra bench bench-repack clean

help:
	@echo "make demo   - set up .venv and run the local pipeline (no AWS account needed)"
	@echo "make test   - set up .venv and run the whole test suite"
	@echo "make test-unit | test-integration | test-infra - one level of the suite"
	@echo "make clean  - remove .venv and generated files"

# Debian tools the project calls: h5repack/h5stat (the reference tool and oracle)
# and ncdump (to check NetCDF-4 files stay NetCDF-4 files).
sysdeps:
	@missing=""; \
	command -v h5repack >/dev/null 2>&1 || missing="$$missing hdf5-tools"; \
	command -v ncdump   >/dev/null 2>&1 || missing="$$missing netcdf-bin"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

$(VENV)/.installed-$(EXTRAS): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
	touch $@

venv: $(VENV)/.installed-$(EXTRAS)

demo: sysdeps venv
	$(VENV)/bin/layoutlab demo

test: sysdeps venv
	$(PY) -m pytest -q tests

test-unit: venv
	$(PY) -m pytest -q tests/unit

test-integration: sysdeps venv
	$(PY) -m pytest -q tests/integration

test-infra: venv
	$(PY) -m pytest -q tests/infra

# layoutlab repack vs h5repack on ~1 GB GEOS-like and ATL03-like inputs (+ the 4 GB memory
# check); figures go to benchmarks/results/bench_repack.json and README.
bench-repack: sysdeps venv
	$(PY) benchmarks/bench_repack.py --workdir /tmp/layoutlab-bench --repeat 3 --memory-check-gb 4

clean:
	rm -rf $(VENV) cdk.out build *.egg-info functions/*.egg-info .pytest_cache demo-output
