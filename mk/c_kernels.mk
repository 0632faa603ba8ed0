# The c_kernels C library's own tests, under AddressSanitizer and UBSan, run with every
# `make test` (plugins/c_kernels/Makefile builds them; a few seconds when unchanged).
.PHONY: test-c
TEST_DEPS += test-c

test-c:
	$(MAKE) --no-print-directory -C plugins/c_kernels test-c
