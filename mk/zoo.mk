# The public model zoo (tests/zoo): Hugging Face `transformers` architectures built from
# configs in code (no downloads), exported with torch.export and torch.onnx (dynamo, which
# needs onnxscript); and `torchao`, whose PT2E flow (prepare_pt2e / convert_pt2e) quantizes
# the models tests/test_torch_pt2e.py imports. None of them requires torch (transformers
# lists it only under extras), so installing them never fetches a torch; the constraint
# file pins torch to the one mk/frontends.mk installed from the local wheel all the same, so
# a future release that did require torch fails here instead of replacing it. Without torch
# the zoo tests skip.
ZOO_STAMP := $(VENV)/.zoo-installed
ZOO_PACKAGES := 'transformers>=5.0,<6' 'onnxscript>=0.5' 'torchao>=0.18'
ZOO_CONSTRAINTS := $(VENV)/.zoo-constraints.txt
TEST_DEPS += $(ZOO_STAMP)

$(ZOO_STAMP): $(FRONTEND_STAMP) mk/zoo.mk
	@if torch_version=$$($(BIN)/python -c 'import torch; print(torch.__version__)' 2>/dev/null); then \
		echo "torch==$$torch_version" > $(ZOO_CONSTRAINTS); \
		echo "installing transformers, onnxscript and torchao (torch pinned to $$torch_version)"; \
		$(BIN)/python -m pip install --quiet --disable-pip-version-check \
			-c $(ZOO_CONSTRAINTS) $(ZOO_PACKAGES) || exit 1; \
		$(BIN)/python -m pip check || exit 1; \
		HF_HUB_OFFLINE=1 $(BIN)/python -c 'import transformers, onnxscript, torchao' || exit 1; \
	else \
		echo "no torch in $(VENV): the model zoo tests will skip"; \
	fi
	touch $@

# `make zoo`: every zoo model by both routes (torch.export and ONNX), with the table of
# what passes and the first failing op of what does not. `make zoo-status` writes that
# table to tests/zoo/STATUS.md (ZOO_JOBS models at a time, default 2).
.PHONY: zoo zoo-status
.SECONDEXPANSION:
zoo: $$(STAMP) $$(TEST_DEPS)
	$(BIN)/python -m pytest -q -m zoo tests/zoo

ZOO_JOBS ?= 2
zoo-status: $$(STAMP) $$(TEST_DEPS)
	$(BIN)/python -m tests.zoo.report tests/zoo/STATUS.md --jobs $(ZOO_JOBS)
