# Benchmarks that take minutes (not part of `make test`).
#   make bench-quant   int8 BERT-base, ResNet-50 and MobileNetV2 at their published sizes:
#                      onnxruntime and c_kernels, float32 and int8, 1 and 2 threads
#                      (benchmarks/quant.py; models exported and quantized once, cached in
#                      ~/.cache/legato-bench or $LEGATO_BENCH_CACHE)
.PHONY: bench-quant

bench-quant: $(STAMP)
	$(BIN)/python benchmarks/quant.py --threads 1,2

# make bench-real: the models people deploy, at their published sizes (BERT-base, GPT-2,
# TinyLlama widths with 4 layers, ViT-base, the Whisper-tiny encoder, ResNet-50, MobileNetV2,
# ConvNeXt-tiny): import and compile time against onnxruntime's session creation, peak
# memory, and c_kernels / onnxruntime / eager latency at 1, 2 and every core
# (benchmarks/real_size.py; exports cached as for bench-quant).
.PHONY: bench-real

bench-real: $(STAMP)
	$(BIN)/python benchmarks/real_size.py
