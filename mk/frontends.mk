# Frontends (legato.frontends): onnx and onnxruntime come with the core's `dev` extra
# (pyproject.toml, installed by $(STAMP)). PyTorch is installed only from a local CPU wheel
# file when one exists for this Python, by its path, so pip never fetches torch from a
# registry; without the wheel the torch importer's tests skip.
TORCH_WHEELS ?= /opt/wheels
FRONTEND_STAMP := $(VENV)/.frontends-installed
TEST_DEPS += $(FRONTEND_STAMP)

$(FRONTEND_STAMP): $(STAMP) mk/frontends.mk
	@tag=cp$$($(BIN)/python -c 'import sys; print("%d%d" % sys.version_info[:2])'); \
	wheel=$$(ls $(TORCH_WHEELS)/torch-*+cpu-$$tag-$$tag-*.whl 2>/dev/null | sort | tail -n 1); \
	if [ -n "$$wheel" ]; then \
		echo "installing torch from $$wheel"; \
		$(BIN)/python -m pip install --quiet --disable-pip-version-check "$$wheel" || exit 1; \
	else \
		echo "no torch CPU wheel for $$tag in $(TORCH_WHEELS): torch frontend tests will skip"; \
	fi
	touch $@

# `make demo` gets onnx through the dev extra ($(STAMP)); it does not need torch.
