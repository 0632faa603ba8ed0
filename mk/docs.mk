# make docs: regenerate the op tables of docs/ops.md from the op definitions
# (a test fails when they are out of date).
.PHONY: docs
docs: $(STAMP)
	$(BIN)/python -m legato.ops.docgen docs/ops.md
