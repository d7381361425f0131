# Two entry points for a fresh machine: `make demo` (the main job) and `make test` (the suite).
# Both create or reuse .venv and install what they need, Debian packages included when run as root.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Debian's firmware-amd-graphics is linux-firmware 20230210, the tag the driver pins.
DEBIAN_FIRMWARE := /lib/firmware/amdgpu

.PHONY: demo test system-deps venv clean

system-deps:
	@bash scripts/install-system-deps.sh

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,smi]'
	touch $@

venv: $(VENV)/.installed

demo: system-deps venv
	@if [ -d $(DEBIAN_FIRMWARE) ]; then $(PY) -m amdrv.firmware seed $(DEBIAN_FIRMWARE); fi
	$(PY) -m compiler_bridge.demo

# Many tests start Python subprocesses: let them reuse compiled bytecode (kept under .venv, out of the
# tree) even where the environment sets PYTHONDONTWRITEBYTECODE, as the development machines do.
test: system-deps venv
	PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(CURDIR)/$(VENV)/pycache $(PY) -m pytest -q -n 2 $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
