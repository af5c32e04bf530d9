#!/usr/bin/env python3
"""Kiln against ONNX Runtime on the same ONNX files, in one run (issue 20's peer benchmark).

Usage: peer_bench.py [--kiln PATH] [--threads N[,N...]] [--rounds R] [--models a,b,...]
                     [--models-dir DIR] [--target-extra "-isa=avx2"] [--before PATH]

Models (written to --models-dir, default /tmp/kiln-peer-models, once; weights and inputs
from a fixed numpy seed, so every run times the same files):

* ``resnet18``: frontend-onnx/scripts/make_ort_models.py's ResNet-18, batch 1, 224²;
* ``resnet50``: torchvision's ResNet-50 layout (Bottleneck blocks, stride on the 3x3 conv)
  built with the same helpers, batch 1, 224²;
* ``mlp_b1``, ``mlp_b64``: MLP 784-512-512-10 (Gemm + Relu), batch 1 and 64;
* ``bert``: make_ort_models.py's BERT-style encoder block at seq 128, hidden 256, 4 heads,
  FFN 1024 (the issue's "transformer encoder block").

Protocol: for each round, for each model, for each thread count: ``kiln bench FILE
--target "cpu -threads=N" --json`` (a fresh process: its ``compile_ms`` is load + optimize
+ compile) and ONNX Runtime (CPU execution provider, N intra-op threads, one inter-op
thread, all graph optimizations; the session is built once per model and thread count and
warmed up), one after the other. Each side takes REPEAT measurements of NUMBER runs; the
round's figure is the median. The table gives, per model and thread count, the median over
rounds of each side, kiln/ORT of those medians, and the median compile_ms. With --before,
a second kiln binary runs too (alternating with the first), so a change is measured
before/after in the same run. The machine is usually shared: the load average before and
after is printed; compare ratios within one run, not times across runs.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "frontend-onnx", "scripts"))
import make_ort_models as mom  # noqa: E402

SEED = 20260520
# (repeat, number) per model: a measurement of at least a few milliseconds.
MEASURE = {
    "resnet18": (5, 1),
    "resnet50": (5, 1),
    "mlp_b1": (7, 200),
    "mlp_b64": (7, 20),
    "bert": (7, 5),
}


def bottleneck(b, x, name, cin, mid, stride):
    """torchvision's Bottleneck (v1.5): 1x1, 3x3 (strided), 1x1 expansion 4, downsample."""
    cout = mid * 4
    y = mom.conv_bn(b, x, f"{name}.conv1", cin, mid, 1, 1, relu=True)
    y = mom.conv_bn(b, y, f"{name}.conv2", mid, mid, 3, stride, relu=True)
    y = mom.conv_bn(b, y, f"{name}.conv3", mid, cout, 1, 1, relu=False)
    if stride != 1 or cin != cout:
        x = mom.conv_bn(b, x, f"{name}.downsample", cin, cout, 1, stride, relu=False)
    y = b.node("Add", [y, x], f"{name}.add")
    return b.node("Relu", [y], f"{name}.relu")


def resnet50(rng):
    b = mom.Builder(rng)
    x = mom.conv_bn(b, "input", "conv1", 3, 64, 7, 2, relu=True)
    x = b.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    cin = 64
    for stage, (mid, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)], start=1):
        for block in range(blocks):
            stride = 2 if stage > 1 and block == 0 else 1
            x = bottleneck(b, x, f"layer{stage}.{block}", cin, mid, stride)
            cin = mid * 4
    x = b.node("GlobalAveragePool", [x], "avgpool")
    x = b.node("Flatten", [x], "flatten", axis=1)
    w = b.init("fc.weight", b.randn((1000, 2048), np.sqrt(1.0 / 2048)))
    bias = b.init("fc.bias", b.randn((1000,), 0.01))
    b.node("Gemm", [x, w, bias], "output", transB=1)
    graph = helper.make_graph(
        b.nodes,
        "resnet50",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1000])],
        b.inits,
    )
    return graph


def mlp(rng, batch):
    b = mom.Builder(rng)
    x = "input"
    dims = [784, 512, 512, 10]
    for i, (cin, cout) in enumerate(zip(dims, dims[1:])):
        w = b.init(f"fc{i}.weight", b.randn((cout, cin), np.sqrt(1.0 / cin)))
        bias = b.init(f"fc{i}.bias", b.randn((cout,), 0.01))
        last = i == len(dims) - 2
        x = b.node("Gemm", [x, w, bias], "output" if last else f"fc{i}", transB=1)
        if not last:
            x = b.node("Relu", [x], f"fc{i}.relu")
    return helper.make_graph(
        b.nodes,
        f"mlp_b{batch}",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 784])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, 10])],
        b.inits,
    )


def build_models(out_dir):
    """Writes every model once; returns {name: path}."""
    rng = np.random.default_rng(SEED)
    makers = {
        "resnet18": lambda: mom.resnet18(rng)[0],
        "resnet50": lambda: resnet50(rng),
        "mlp_b1": lambda: mlp(rng, 1),
        "mlp_b64": lambda: mlp(rng, 64),
        "bert": lambda: mom.bert_encoder(rng, seq=128, hidden=256, heads=4, ffn=1024)[0],
    }
    paths = {}
    os.makedirs(out_dir, exist_ok=True)
    for name, make in makers.items():
        path = os.path.join(out_dir, f"{name}.onnx")
        paths[name] = path
        if os.path.exists(path):
            continue
        model = helper.make_model(
            make(), opset_imports=[helper.make_opsetid("", mom.OPSET)], producer_name="kiln peer_bench.py"
        )
        model.ir_version = 8
        onnx.checker.check_model(model)
        onnx.save(model, path)
    return paths


def ort_session(path, threads):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        feeds[i.name] = rng.uniform(-1.0, 1.0, shape).astype(np.float32)
    sess.run(None, feeds)
    return sess, feeds


def ort_time(sess, feeds, repeat, number):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1000.0 / number)
    return statistics.median(times)


def kiln_time(kiln, path, target, repeat, number):
    cmd = [kiln, "bench", path, "--target", target, "--json", "--repeat", str(repeat), "--number", str(number)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr}")
    report = json.loads(out.stdout.strip().splitlines()[-1])
    return report["median_ms"], report["compile_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "release", "kiln"))
    ap.add_argument("--before", help="a second kiln binary, timed alternating with --kiln")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default=",".join(MEASURE))
    ap.add_argument("--models-dir", default="/tmp/kiln-peer-models")
    ap.add_argument("--target-extra", default="", help="more target options, e.g. -isa=avx2")
    args = ap.parse_args()

    paths = build_models(args.models_dir)
    models = args.models.split(",")
    threads = [int(t) for t in args.threads.split(",")]
    kilns = [("kiln", args.kiln)] + ([("before", args.before)] if args.before else [])
    print(f"onnxruntime {ort.__version__}; load average before: {os.getloadavg()}", flush=True)
    sessions = {(m, t): ort_session(paths[m], t) for m in models for t in threads}
    ms = {}  # (side, model, threads) -> [medians]
    compile_ms = {}
    for r in range(args.rounds):
        for m in models:
            repeat, number = MEASURE[m]
            for t in threads:
                target = f"cpu -threads={t} {args.target_extra}".strip()
                for side, binary in kilns:
                    k, c = kiln_time(binary, paths[m], target, repeat, number)
                    ms.setdefault((side, m, t), []).append(k)
                    compile_ms.setdefault((side, m, t), []).append(c)
                o = ort_time(*sessions[(m, t)], repeat, number)
                ms.setdefault(("ort", m, t), []).append(o)
                line = " ".join(f"{side} {ms[(side, m, t)][-1]:.3f}" for side, _ in kilns)
                print(f"round {r + 1} {m} threads={t}: {line} ort {o:.3f} ms", flush=True)
    print(f"load average after: {os.getloadavg()}")
    med = statistics.median
    head = "| model | threads | ORT ms |"
    for side, _ in kilns:
        head += f" {side} ms | {side}/ORT | {side} compile ms |"
    print()
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for m in models:
        for t in threads:
            o = med(ms[("ort", m, t)])
            row = f"| {m} | {t} | {o:.3f} |"
            for side, _ in kilns:
                k = med(ms[(side, m, t)])
                row += f" {k:.3f} | {k / o:.2f} | {med(compile_ms[(side, m, t)]):.0f} |"
            print(row)


if __name__ == "__main__":
    main()
