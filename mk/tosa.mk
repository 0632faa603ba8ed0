# The official TOSA tools (tosa-opt, the TOSA reference model) for the tosa_custom tests,
# which validate and run every module they emit. tosa-tools pins numpy<2.2 on Python 3.11,
# so it gets a venv of its own; tests find it at .venv-tosa (or $LEGATO_TOSA_VENV).
TOSA_VENV := .venv-tosa
TOSA_TOOLS := tosa-tools==2026.8.0
TOSA_STAMP := $(TOSA_VENV)/.installed
TEST_DEPS += $(TOSA_STAMP)

$(TOSA_STAMP): mk/tosa.mk
	test -x $(TOSA_VENV)/bin/python || $(PYTHON) -m venv $(TOSA_VENV)
	$(TOSA_VENV)/bin/python -m pip install --quiet --disable-pip-version-check "$(TOSA_TOOLS)"
	$(TOSA_VENV)/bin/tosa-opt --version >/dev/null
	$(TOSA_VENV)/bin/python -c "import tosa_reference_model"
	touch $@

# The tosa_custom tests alone (plugins/tosa_custom/tests), with the tools in place.
.PHONY: test-tosa
test-tosa: $(STAMP) $(TOSA_STAMP)
	$(BIN)/python -m pytest -q plugins/tosa_custom/tests
