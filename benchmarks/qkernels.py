"""int8 GEMM and conv kernels of c_kernels against its float32 kernels and onnxruntime.

    .venv/bin/python benchmarks/qkernels.py [--threads 1] [--repeat 30] [--cases bert,dw]

Sizes from the published models: BERT-base's linear layers (128 tokens, 768 -> 768 and
768 -> 3072), ResNet-50's 3x3 conv of 64 channels on 56x56, MobileNetV2's depthwise 3x3 on
32 channels of 112x112. Per case, median ms of:
  c int8   c_kernels' int8 kernel (qnn.linear / qnn.conv2d, weight packed once, uint8 data,
           int8 per-channel weight, int32 bias), as the prepared call a planned model makes
  c fp32   c_kernels' float32 kernel on the same shapes (weight packed once)
  ort q    onnxruntime QLinearMatMul / QLinearConv (weight an initializer, prepacked)
  ort mmi  onnxruntime MatMulInteger (uint8 x int8 -> int32; GEMMs only)
  ort fp32 onnxruntime MatMul / Conv in float32
and the ratios c fp32 / c int8 (above 1: int8 faster) and ort q / c int8 (above 1: c_kernels
faster). Every timing is interleaved with the others (zoo.interleaved_medians) so load from
other processes falls on all alike.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

if __name__ == "__main__":  # thread counts before numpy or c_kernels load
    sys.path.insert(0, str(REPO))
    from benchmarks import zoo
    _n = str(zoo._threads_from_argv(sys.argv[1:]))
    for _var in ("LEGATO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                 "MKL_NUM_THREADS"):
        os.environ[_var] = _n

import numpy as np  # noqa: E402

from benchmarks.zoo import interleaved_medians, ort_session  # noqa: E402

GEMMS = {"bert 128x768x768": (128, 768, 768), "bert 128x768x3072": (128, 768, 3072)}
CONVS = {"resnet50 3x3 64->64 56x56": ((1, 64, 56, 56), (64, 64, 3, 3), 1),
         "mobilenetv2 dw3x3 32 112x112": ((1, 32, 112, 112), (32, 1, 3, 3), 32)}


def one_node(op: str, inputs: dict, initializers: dict, out_dtype, path: Path, **attrs):
    import onnx
    from onnx import helper, numpy_helper
    tensor = helper.np_dtype_to_tensor_dtype
    graph = helper.make_graph(
        [helper.make_node(op, list(inputs) + list(initializers), ["y"], **attrs)], op,
        [helper.make_tensor_value_info(n, tensor(v.dtype), v.shape) for n, v in inputs.items()],
        [helper.make_tensor_value_info("y", tensor(np.dtype(out_dtype)), None)],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def quant_params(rng, n_out):
    return dict(xs=np.array(0.02, np.float32), xz=np.array(128, np.uint8),
                ws=rng.uniform(1e-3, 1e-2, n_out).astype(np.float32),
                wz=np.zeros(n_out, np.int8), ys=np.array(0.3, np.float32),
                yz=np.array(120, np.uint8), bias=rng.integers(-5000, 5000, n_out).astype(np.int32))


def gemm_runs(m, k, n, threads, tmp):
    from legato_c_kernels import kernels as K
    from legato_c_kernels.kernels import qnn
    rng = np.random.default_rng(0)
    x8 = rng.integers(0, 256, (m, k)).astype(np.uint8)
    w8 = rng.integers(-128, 128, (n, k)).astype(np.int8)
    xf, wf = rng.standard_normal((m, k), np.float32), rng.standard_normal((n, k), np.float32)
    q = quant_params(rng, n)
    packed8, packedf = qnn.pack_qweight(w8), K.pack_weight(wf, transposed=True)
    y8, yf = np.empty((m, n), np.uint8), np.empty((m, n), np.float32)
    qlm = ort_session(one_node("QLinearMatMul", {"a": x8}, {
        "a_scale": q["xs"], "a_zero_point": q["xz"], "b": w8.T.copy(), "b_scale": q["ws"],
        "b_zero_point": q["wz"], "y_scale": q["ys"], "y_zero_point": q["yz"]}, np.uint8,
        tmp / "qlm.onnx"), threads)
    mmi = ort_session(one_node("MatMulInteger", {"a": x8}, {
        "b": w8.T.copy(), "a_zero_point": q["xz"], "b_zero_point": q["wz"]}, np.int32,
        tmp / "mmi.onnx"), threads)
    mm = ort_session(one_node("MatMul", {"a": xf}, {"b": wf.T.copy()}, np.float32,
                              tmp / "mm.onnx"), threads)
    return {  # prepared calls, as a planned model makes them
        "c int8": qnn.qnn_linear.bind(x8, q["xs"], q["xz"], packed8, q["ws"], q["wz"], q["ys"],
                                      q["yz"], q["bias"], out=y8),
        "c fp32": K.nn_linear.bind(xf, packedf, out=yf),
        "ort q": lambda: qlm.run(None, {"a": x8}),
        "ort mmi": lambda: mmi.run(None, {"a": x8}),
        "ort fp32": lambda: mm.run(None, {"a": xf}),
    }


def conv_runs(x_shape, w_shape, groups, threads, tmp):
    from legato_c_kernels import kernels as K
    from legato_c_kernels.kernels import qnn
    rng = np.random.default_rng(1)
    x8 = rng.integers(0, 256, x_shape).astype(np.uint8)
    w8 = rng.integers(-128, 128, w_shape).astype(np.int8)
    xf, wf = rng.standard_normal(x_shape, np.float32), rng.standard_normal(w_shape, np.float32)
    q = quant_params(rng, w_shape[0])
    bias_f = rng.standard_normal(w_shape[0], np.float32)
    packed8 = qnn.pack_qconv_weight(w8, groups=groups) or w8
    packedf = K.pack_conv_weight(wf, groups=groups) or wf
    attrs = dict(padding=[1, 1, 1, 1], groups=groups)
    ort_attrs = dict(pads=[1, 1, 1, 1], group=groups)
    qc = ort_session(one_node("QLinearConv", {"x": x8}, {
        "x_scale": q["xs"], "x_zero_point": q["xz"], "w": w8, "w_scale": q["ws"],
        "w_zero_point": q["wz"], "y_scale": q["ys"], "y_zero_point": q["yz"], "B": q["bias"]},
        np.uint8, tmp / "qc.onnx", **ort_attrs), threads)
    fc = ort_session(one_node("Conv", {"x": xf}, {"w": wf, "B": bias_f}, np.float32,
                              tmp / "c.onnx", **ort_attrs), threads)
    y8 = np.empty((x_shape[0], w_shape[0]) + x_shape[2:], np.uint8)  # stride 1, padding 1
    yf = np.empty(y8.shape, np.float32)
    return {  # prepared calls, as a planned model makes them
        "c int8": qnn.qnn_conv2d.bind(x8, q["xs"], q["xz"], packed8, q["ws"], q["wz"], q["ys"],
                                      q["yz"], q["bias"], out=y8, **attrs),
        "c fp32": K.nn_conv2d.bind(xf, packedf, bias_f, out=yf, **attrs),
        "ort q": lambda: qc.run(None, {"x": x8}),
        "ort fp32": lambda: fc.run(None, {"x": xf}),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--cases", default="")
    args = parser.parse_args(argv)
    from legato_c_kernels._lib import lib
    words = [w for w in args.cases.split(",") if w]
    family = {1: "generic", 2: "avx2", 3: "avx512-vnni"}[lib.lgk_qgemm_isa()]
    print(f"int8 family {family}, {args.threads} thread(s); median ms")
    cols = ["c int8", "c fp32", "ort q", "ort mmi", "ort fp32"]
    print(f"{'case':32}" + "".join(f"{c:>10}" for c in cols) + f"{'fp32/int8':>11}{'ortq/c8':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        cases = {**{k: ("gemm", v) for k, v in GEMMS.items()},
                 **{k: ("conv", v) for k, v in CONVS.items()}}
        for name, (kind, spec) in cases.items():
            if words and not any(w in name for w in words):
                continue
            runs = gemm_runs(*spec, args.threads, Path(tmp)) if kind == "gemm" else \
                conv_runs(*spec, args.threads, Path(tmp))
            for fn in runs.values():  # warm-up: packing, first-touch, sessions' prepacking
                fn()
            t = interleaved_medians({k: (fn,) for k, fn in runs.items()}, args.repeat)
            cells = "".join(f"{t[c]:10.3f}" if c in t else f"{'-':>10}" for c in cols)
            print(f"{name:32}{cells}{t['c fp32'] / t['c int8']:11.2f}"
                  f"{t['ort q'] / t['c int8']:9.2f}")


if __name__ == "__main__":
    main()
