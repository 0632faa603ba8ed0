"""Single convolutions and pools from the zoo's CNNs on c_kernels against onnxruntime.

    .venv/bin/python benchmarks/convs.py [--cases resnet,dw] [--threads 1] [--repeat 50]
    .venv/bin/python benchmarks/convs.py --cases dw --kernels

Every case is a one-node ONNX model (a Conv with bias, optionally followed by its model's
activation, or a MaxPool) built with onnx.helper; the same model runs on onnxruntime
(intra-op threads = --threads, sequential) and through legato on c_kernels. Printed per
case: median µs of both, onnxruntime / c_kernels throughput (above 1: c_kernels faster)
and the largest error of c_kernels relative to onnxruntime's largest magnitude.
`--cases` keeps the cases whose name contains any of the comma-separated words; the convs of
ResNet-50, MobileNetV2 and ConvNeXt-tiny at 224^2 ("real ...") run only when named (`--cases real`).
Whole runs are timed in interleaved rounds, so load from other processes falls on both.

`--kernels` times the kernels alone instead of whole runs (no per-run overhead of either
runtime): c_kernels' plan steps (their medians, summed) against onnxruntime's profiled
node times (Conv and its activation nodes; its NCHWc layout reorders are left out, as a
model of such convs pays them once per run of them). onnxruntime reports whole
microseconds, so its small figures are coarse.

`--cpu-time` (1 thread only) times each call by the calling thread's CPU time instead of
the wall clock and reports the fastest call of each: both runtimes then run the whole call
on the caller's thread, and on a loaded machine time spent descheduled is not counted, so
the figures hold at loads where wall-clock medians wander by 2x.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Case:
    """A conv (groups, kernel k, stride, symmetric pad) of c -> o channels on an h x w map,
    or a max pool (o == 0) of kernel k."""
    name: str
    c: int
    o: int
    hw: int
    k: int
    stride: int = 1
    pad: int = 0
    groups: int = 1
    act: str = "none"  # none, relu, relu6, silu
    pads: tuple | None = None  # (top, left, bottom, right) where not `pad` on every side

    def padding(self) -> tuple:
        return self.pads if self.pads is not None else (self.pad,) * 4

    def out_hw(self) -> tuple:
        top, left, bottom, right = self.padding()
        return ((self.hw + top + bottom - self.k) // self.stride + 1,
                (self.hw + left + right - self.k) // self.stride + 1)


def _dw(name, c, hw, k, stride=1, act="none", pads=None):
    return Case(name, c, c, hw, k, stride, k // 2, c, act, pads)


TF_S2 = (0, 0, 1, 1)  # exporters' "same" padding of a stride-2 3x3: all at the end


CASES = [
    Case("resnet stem 7x7 s2 3->32 64x64", 3, 32, 64, 7, 2, 3, act="relu"),
    Case("resnet 3x3 256->256 2x2", 256, 256, 2, 3, 1, 1, act="relu"),
    Case("resnet 3x3 64->64 8x8", 64, 64, 8, 3, 1, 1, act="relu"),
    Case("resnet 3x3 32->32 16x16", 32, 32, 16, 3, 1, 1, act="relu"),
    Case("resnet 3x3 128->128 4x4", 128, 128, 4, 3, 1, 1, act="relu"),
    Case("resnet 3x3 s2 128->256 4x4", 128, 256, 4, 3, 2, 1, act="relu"),
    Case("resnet 3x3 s2 32->64 16x16", 32, 64, 16, 3, 2, 1, act="relu"),
    Case("resnet 3x3 s2 64->128 8x8", 64, 128, 8, 3, 2, 1, act="relu"),
    Case("resnet maxpool 3x3 s2 32x32x32", 32, 0, 32, 3, 2, 1),
    Case("efficientnet 1x1 16->640 16x16 silu", 16, 640, 16, 1, act="silu"),
    Case("efficientnet 1x1 16->640 16x16", 16, 640, 16, 1),
    Case("efficientnet stem 3x3 s2 3->16 64x64", 3, 16, 64, 3, 2, 1, act="silu"),
    Case("efficientnet 1x1 8->32 32x32", 8, 32, 32, 1, act="silu"),
    Case("mobilenet_v2 stem 3x3 s2 3->16 64x64", 3, 16, 64, 3, 2, 1, act="relu6"),
    Case("mobilenet_v2 1x1 112->1280 2x2", 112, 1280, 2, 1, act="relu6"),
    Case("mobilenet_v2 1x1 8->48 32x32", 8, 48, 32, 1, act="relu6"),
    Case("mobilevit 3x3 64->32 8x8", 64, 32, 8, 3, 1, 1, act="silu"),
    Case("mobilevit 1x1 16->32 32x32", 16, 32, 32, 1, act="silu"),
    Case("mobilevit 3x3 80->40 4x4", 80, 40, 4, 3, 1, 1, act="silu"),
    Case("mobilevit 3x3 32->32 8x8", 32, 32, 8, 3, 1, 1, act="silu"),
    Case("mobilevit 3x3 96->48 2x2", 96, 48, 2, 3, 1, 1, act="silu"),
    Case("segformer 7x7 s4 3->32 64x64", 3, 32, 64, 7, 4, 3),
    Case("segformer 3x3 s2 32->64 16x16", 32, 64, 16, 3, 2, 1),
    Case("convnext patchify 4x4 s4 3->32 64x64", 3, 32, 64, 4, 4),
    Case("convnext 2x2 s2 32->64 16x16", 32, 64, 16, 2, 2),
    Case("regnet 3x3 s2 g2 16->16 32x32", 16, 16, 32, 3, 2, 1, groups=2, act="relu"),
    Case("regnet 3x3 s2 g4 32->32 16x16", 32, 32, 16, 3, 2, 1, groups=4, act="relu"),
    _dw("dw 3x3 336x2x2", 336, 2, 3, act="relu6"),
    _dw("dw 3x3 192x4x4", 192, 4, 3, act="relu6"),
    _dw("dw 3x3 s2 192x4x4", 192, 4, 3, 2, act="relu6"),
    _dw("dw 3x3 s2 48x32x32", 48, 32, 3, 2, act="relu6"),
    _dw("dw 3x3 16x32x32", 16, 32, 3, act="silu"),
    _dw("dw 3x3 48x16x16", 48, 16, 3, act="relu6"),
    _dw("dw 7x7 32x16x16", 32, 16, 7),
    _dw("dw 7x7 64x8x8", 64, 8, 7),
    _dw("dw 5x5 s2 32x32x32", 32, 32, 5, 2, act="silu"),
    # the zoo's other depthwise convs, with their models' padding and activation
    _dw("dw mobilenet_v2 3x3 16x32x32", 16, 32, 3, act="relu6"),
    _dw("dw mobilenet_v2 3x3 s2 48x32x32", 48, 32, 3, 2, "relu6", TF_S2),
    _dw("dw mobilenet_v2 3x3 s2 48x16x16", 48, 16, 3, 2, "relu6", TF_S2),
    _dw("dw mobilenet_v2 3x3 96x8x8", 96, 8, 3, act="relu6"),
    _dw("dw mobilenet_v2 3x3 s2 96x8x8", 96, 8, 3, 2, "relu6", TF_S2),
    _dw("dw mobilenet_v2 3x3 144x4x4", 144, 4, 3, act="relu6"),
    _dw("dw mobilenet_v2 3x3 s2 192x4x4", 192, 4, 3, 2, "relu6", TF_S2),
    _dw("dw efficientnet 5x5 s2 32x32x32", 32, 32, 5, 2, "silu", (1, 1, 2, 2)),
    _dw("dw mobilevit 3x3 s2 32x32x32", 32, 32, 3, 2, act="silu"),
    _dw("dw mobilevit 3x3 s2 48x16x16", 48, 16, 3, 2, act="silu"),
    _dw("dw mobilevit 3x3 s2 64x8x8", 64, 8, 3, 2, act="silu"),
    _dw("dw mobilevit 3x3 s2 80x4x4", 80, 4, 3, 2, act="silu"),
    _dw("dw segformer 3x3 64x16x16", 64, 16, 3),
    _dw("dw segformer 3x3 128x8x8", 128, 8, 3),
]

# The heaviest convs of ResNet-50 and MobileNetV2 at 224^2 and ConvNeXt-tiny's depthwise
# ones (benchmarks/real_size.py), by the shape they run at there ("real" selects them all;
# they are kept apart from the zoo's small cases above, which measure per-call costs
# instead).
REAL_CASES = [
    Case("real resnet50 stem 7x7 s2 3->64 224", 3, 64, 224, 7, 2, 3, act="relu"),
    Case("real resnet50 3x3 64->64 56", 64, 64, 56, 3, 1, 1, act="relu"),
    Case("real resnet50 3x3 128->128 28", 128, 128, 28, 3, 1, 1, act="relu"),
    Case("real resnet50 3x3 256->256 14", 256, 256, 14, 3, 1, 1, act="relu"),
    Case("real resnet50 3x3 512->512 7", 512, 512, 7, 3, 1, 1, act="relu"),
    Case("real resnet50 3x3 s2 128->128 56", 128, 128, 56, 3, 2, 1, act="relu"),
    Case("real resnet50 1x1 64->256 56", 64, 256, 56, 1),
    Case("real resnet50 1x1 256->64 56", 256, 64, 56, 1, act="relu"),
    Case("real resnet50 1x1 256->128 56", 256, 128, 56, 1, act="relu"),
    Case("real resnet50 1x1 s2 256->512 56", 256, 512, 56, 1, 2),
    Case("real resnet50 1x1 512->256 28", 512, 256, 28, 1, act="relu"),
    Case("real resnet50 1x1 1024->512 14", 1024, 512, 14, 1, act="relu"),
    Case("real resnet50 1x1 256->1024 14", 256, 1024, 14, 1),
    Case("real resnet50 1x1 512->2048 7", 512, 2048, 7, 1),
    Case("real resnet50 1x1 2048->512 7", 2048, 512, 7, 1, act="relu"),
    Case("real mobilenetv2 stem 3x3 s2 3->32 224", 3, 32, 224, 3, 2, 1, act="relu6"),
    _dw("real mobilenetv2 dw 3x3 32x112", 32, 112, 3, act="relu6"),
    Case("real mobilenetv2 1x1 32->16 112", 32, 16, 112, 1),
    Case("real mobilenetv2 1x1 16->96 112", 16, 96, 112, 1, act="relu6"),
    _dw("real mobilenetv2 dw 3x3 s2 96x112", 96, 112, 3, 2, "relu6", TF_S2),
    Case("real mobilenetv2 1x1 144->24 56", 144, 24, 56, 1),
    Case("real mobilenetv2 1x1 24->144 56", 24, 144, 56, 1, act="relu6"),
    _dw("real mobilenetv2 dw 3x3 144x56", 144, 56, 3, act="relu6"),
    Case("real mobilenetv2 1x1 192->32 28", 192, 32, 28, 1),
    Case("real mobilenetv2 1x1 32->192 28", 32, 192, 28, 1, act="relu6"),
    _dw("real mobilenetv2 dw 3x3 192x28", 192, 28, 3, act="relu6"),
    Case("real mobilenetv2 1x1 384->64 14", 384, 64, 14, 1),
    Case("real mobilenetv2 1x1 64->384 14", 64, 384, 14, 1, act="relu6"),
    _dw("real mobilenetv2 dw 3x3 384x14", 384, 14, 3, act="relu6"),
    Case("real mobilenetv2 1x1 960->160 7", 960, 160, 7, 1),
    Case("real mobilenetv2 1x1 160->960 7", 160, 960, 7, 1, act="relu6"),
    Case("real mobilenetv2 1x1 320->1280 7", 320, 1280, 7, 1, act="relu6"),
    _dw("real convnext dw 7x7 96x56", 96, 56, 7),
    _dw("real convnext dw 7x7 192x28", 192, 28, 7),
    _dw("real convnext dw 7x7 384x14", 384, 14, 7),
    _dw("real convnext dw 7x7 768x7", 768, 7, 7),
]


def _activation_nodes(helper, act: str, x: str, y: str) -> list:
    """ONNX nodes computing y = act(x), as exporters write them."""
    if act == "relu":
        return [helper.make_node("Relu", [x], [y])]
    if act == "relu6":
        return [helper.make_node("Clip", [x, "zero", "six"], [y])]
    if act == "silu":
        return [helper.make_node("Sigmoid", [x], ["sig"]), helper.make_node("Mul", [x, "sig"], [y])]
    raise ValueError(f"unknown activation {act!r}")


def onnx_model(case: Case, seed: int = 0):
    """The case as a one-conv (or one-pool) ONNX ModelProto with random weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    n_out = case.o or case.c
    pads = list(case.padding())
    inits, nodes = [], []
    conv_out = "y" if case.act == "none" else "conv"
    if case.o == 0:
        nodes.append(helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[case.k] * 2,
                                      strides=[case.stride] * 2, pads=pads))
    else:
        fan_in = case.c // case.groups * case.k * case.k
        weight = rng.standard_normal((case.o, case.c // case.groups, case.k, case.k))
        weight = (weight / math.sqrt(fan_in)).astype(np.float32)
        bias = (0.1 * rng.standard_normal(case.o)).astype(np.float32)
        inits += [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")]
        nodes.append(helper.make_node("Conv", ["x", "w", "b"], [conv_out],
                                      kernel_shape=[case.k] * 2, strides=[case.stride] * 2,
                                      pads=pads, group=case.groups))
        if case.act != "none":
            if case.act == "relu6":
                inits += [numpy_helper.from_array(np.array(0, np.float32), "zero"),
                          numpy_helper.from_array(np.array(6, np.float32), "six")]
            nodes += _activation_nodes(helper, case.act, conv_out, "y")
    out_h, out_w = case.out_hw()
    graph = helper.make_graph(
        nodes, "one_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, case.c, case.hw, case.hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n_out, out_h, out_w])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


ORT_LAYOUT_NODES = ("ReorderInput", "ReorderOutput")


def ort_kernel_us(path: Path, threads: int, feeds: dict, repeat: int, tmp: Path) -> float:
    """Median µs per run of onnxruntime's kernels (its profiler's node times) other than
    its layout reorders, summed over the nodes of a run."""
    import json

    import onnxruntime as ort
    options = ort.SessionOptions()  # as zoo.ort_session's, profiled
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp / "ort_profile")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    for _ in range(max(repeat, 20) + 10):
        session.run(None, feeds)
    profile = Path(session.end_profiling())
    runs, current = [], 0.0
    for event in json.loads(profile.read_text()):
        if event.get("cat") == "Session" and event.get("name") == "model_run":
            runs.append(current)  # a run's node events come before its model_run event
            current = 0.0
        elif (event.get("cat") == "Node" and event["name"].endswith("_kernel_time")
              and event.get("args", {}).get("op_name") not in ORT_LAYOUT_NODES):
            current += event["dur"]
    profile.unlink()
    return float(np.median(runs[10:]))


def ck_kernel_us(compiled, x, repeat: int) -> float:
    """Median µs of c_kernels' plan steps (each step's median, summed)."""
    compiled(x)
    return sum(us for _, us in compiled._runner.profile(x, repeat=max(repeat, 20)))


def cpu_time_mins(runs: dict, repeat: int, rounds: int = 5) -> dict:
    """Fastest call (µs of the calling thread's CPU time) per runtime, sampled in
    interleaved rounds after a warm-up call each."""
    import time
    best = {name: math.inf for name in runs}
    for fn, *args in runs.values():
        fn(*args)
    for _ in range(rounds):
        for name, (fn, *args) in runs.items():
            for _ in range(max(1, repeat // rounds)):
                start = time.thread_time_ns()
                fn(*args)
                best[name] = min(best[name], (time.thread_time_ns() - start) / 1e3)
    return best


def measure(case: Case, threads: int, repeat: int, tmp: Path, kernels: bool = False,
            cpu_time: bool = False) -> dict:
    import legato
    from legato.frontends import onnx as onnx_frontend
    model = onnx_model(case)
    path = tmp / "case.onnx"
    path.write_bytes(model.SerializeToString())
    x = np.random.default_rng(1).standard_normal((1, case.c, case.hw, case.hw)).astype(np.float32)
    session = ort_session(path, threads)
    feeds = {session.get_inputs()[0].name: x}
    compiled = legato.compile(onnx_frontend.load(model), "c_kernels")
    want = session.run(None, feeds)[0]
    got = np.asarray(compiled(x))
    error = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))
    if kernels:
        ort_us = ort_kernel_us(path, threads, feeds, repeat, tmp)
        ck_us = ck_kernel_us(compiled, x, repeat)
    elif cpu_time:
        us = cpu_time_mins({"ort": (session.run, None, feeds), "ck": (compiled, x)}, repeat)
        ort_us, ck_us = us["ort"], us["ck"]
    else:  # interleaved: load from other processes falls on both alike
        ms = interleaved_medians({"ort": (session.run, None, feeds), "ck": (compiled, x)},
                                 repeat)
        ort_us, ck_us = 1e3 * ms["ort"], 1e3 * ms["ck"]
    return {"c_kernels": ck_us, "onnxruntime": ort_us, "error": error}


def main(argv=None) -> int:
    import tempfile
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="threads for both (default 1)")
    parser.add_argument("--repeat", type=int, default=50, help="timed calls per figure")
    parser.add_argument("--cases", help="comma-separated words; cases whose name has one")
    parser.add_argument("--kernels", action="store_true",
                        help="time the kernels alone (plan steps vs onnxruntime's profiler)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="fastest call by the calling thread's CPU time (1 thread)")
    args = parser.parse_args(argv)
    if args.cpu_time and args.threads != 1:
        parser.error("--cpu-time times the calling thread only: use --threads 1")
    os.environ.setdefault("LEGATO_NUM_THREADS", str(args.threads))
    words = args.cases.split(",") if args.cases else None
    pool = CASES + REAL_CASES if words is not None else CASES
    cases = [c for c in pool if words is None or any(w in c.name for w in words)]
    if not cases:
        parser.error(f"no case matches {args.cases!r}")
    print(f"threads: {args.threads}" + ("; kernels alone" if args.kernels else "")
          + ("; fastest call by thread CPU time" if args.cpu_time else ""))
    print(f"{'case':<40} {'c_k us':>8} {'ort us':>8} {'ort/c_k':>8} {'rel err':>9}")
    ratios, worst = [], 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            row = measure(case, args.threads, args.repeat, Path(tmp), args.kernels,
                          args.cpu_time)
            ratio = row["onnxruntime"] / row["c_kernels"]
            ratios.append(ratio)
            worst = max(worst, row["error"])
            print(f"{case.name:<40} {row['c_kernels']:>8.1f} {row['onnxruntime']:>8.1f} "
                  f"{ratio:>8.2f} {row['error']:>9.1e}", flush=True)
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(f"geometric mean ort/c_k over {len(ratios)} cases: {geomean:.2f}; "
          f"largest rel err {worst:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
