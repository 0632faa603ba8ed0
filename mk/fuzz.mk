# `make fuzz`: the fuzz targets (tests/fuzz/target_*.py) for FUZZ_MINUTES in worker
# processes, after the same set-up as `make test`. Prints cases, crashes, hangs, raw
# exceptions, mismatches and invalid outputs per target, with a reproducing command per
# problem; fails when there is any. FUZZ_ARGS passes more options to the harness, e.g.
# FUZZ_ARGS="--target programs --seed-start 100000".
FUZZ_MINUTES ?= 10
FUZZ_JOBS ?= 2
FUZZ_ARGS ?=
.PHONY: fuzz

# Second expansion: mk/*.mk read after this file still add their stamps to TEST_DEPS.
.SECONDEXPANSION:
fuzz: $$(STAMP) $$(TEST_DEPS)
	$(BIN)/python -m tests.fuzz --minutes $(FUZZ_MINUTES) --jobs $(FUZZ_JOBS) $(FUZZ_ARGS)
