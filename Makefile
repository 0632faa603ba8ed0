# `make demo` and `make test` each set up .venv with the core and every plugin under
# plugins/ (editable installs), then run. Re-running is fast: the install step only
# runs again when a pyproject, setup.py, C source or this Makefile changes.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PLUGINS := $(sort $(dir $(wildcard plugins/*/pyproject.toml)))
STAMP := $(VENV)/.installed
INSTALL_DEPS := pyproject.toml Makefile $(wildcard plugins/*/pyproject.toml plugins/*/setup.py \
	plugins/*/csrc/*.c plugins/*/csrc/*.h plugins/*/csrc/*.inc plugins/*/*/_build.py)

# Extra set-up steps (e.g. tools in their own venvs) live in mk/*.mk and add their stamp
# files to TEST_DEPS.
TEST_DEPS :=
.DEFAULT_GOAL := demo
-include mk/*.mk

.PHONY: demo test bench clean check-kit pictures

$(STAMP): $(INSTALL_DEPS)
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python >= 3.10"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[dev]" \
		$(foreach p,$(PLUGINS),-e $(p))
	touch $@

demo: $(STAMP)
	$(BIN)/legato demo

test: $(STAMP) $(TEST_DEPS)
	$(BIN)/python -m pytest -q

# The plugin author's path end to end: `legato init`, a real `pip install -e` (into a
# throw-away venv that sees this one's packages), `legato check-backend` and the
# scaffold's own test. Slower than the in-process test of the same in `make test`.
KIT_DIR := $(shell mktemp -u /tmp/legato-kit.XXXXXX)
check-kit: $(STAMP)
	mkdir -p $(KIT_DIR) && cd $(KIT_DIR) && $(abspath $(BIN))/legato init demo_npu
	$(PYTHON) -m venv --without-pip $(KIT_DIR)/venv
	echo "import site; site.addsitedir('$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')')" \
		> $$($(KIT_DIR)/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/legato_dev.pth
	$(BIN)/python -m pip --python $(KIT_DIR)/venv/bin/python install --quiet --no-deps \
		--no-build-isolation --disable-pip-version-check -e $(KIT_DIR)/demo_npu
	$(KIT_DIR)/venv/bin/python -m legato.cli check-backend demo_npu
	cd $(KIT_DIR)/demo_npu && $(KIT_DIR)/venv/bin/python -m pytest -q -p no:cacheprovider
	rm -rf $(KIT_DIR)

# The README's pictures (legato show); Graphviz's dot lays them out when installed,
# legato's own layout otherwise.
pictures: $(STAMP)
	$(BIN)/legato show example:transformer --backend c_kernels -o docs/img/transformer.svg
	$(BIN)/legato show example:transformer --backend c_kernels \
		--config docs/img/decompose.yaml -o docs/img/transformer-decomposed.svg

bench: $(STAMP)
	$(BIN)/python benchmarks/legalize.py

clean:
	rm -rf $(VENV) build *.egg-info core/*.egg-info plugins/*/*.egg-info
