# Benchmarks that take minutes (not part of `make test`).
#   make bench-quant   int8 BERT-base, ResNet-50 and MobileNetV2 at their published sizes:
#                      onnxruntime and c_kernels, float32 and int8, 1 and 2 threads
#                      (benchmarks/quant.py; models exported and quantized once, cached in
#                      ~/.cache/legato-bench or $LEGATO_BENCH_CACHE)
.PHONY: bench-quant

bench-quant: $(STAMP)
	$(BIN)/python benchmarks/quant.py --threads 1,2
