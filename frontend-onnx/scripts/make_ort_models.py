#!/usr/bin/env python3
"""Builds two ONNX models with random weights and saves ONNX Runtime's outputs for them.

Usage: make_ort_models.py OUT_DIR

Writes, in ONNX's standard test layout (``model.onnx`` plus
``test_data_set_0/input_0.pb`` and ``output_0.pb``, serialized TensorProto):

* ``OUT_DIR/resnet18``: torchvision's ResNet-18 (conv1 7x7/2 + BatchNormalization + Relu
  + MaxPool 3x3/2, four stages of two BasicBlocks with a 1x1 conv + BatchNormalization
  downsample on the stride-2 stages, GlobalAveragePool, Flatten, Gemm 512 -> 1000) on a
  (1, 3, 224, 224) input;
* ``OUT_DIR/bert_encoder``: a BERT-style encoder block (batch 1, sequence 16, hidden 64,
  4 heads): Q, K, V projections (MatMul + Add), Reshape/Transpose to heads, MatMul, Div
  by sqrt(16), Softmax, MatMul, Transpose/Reshape back, output projection, residual Add,
  LayerNormalization, a feed-forward block MatMul + Add + Erf-based GELU + MatMul + Add,
  residual Add, LayerNormalization.

Weights and inputs come from numpy's generator with a fixed seed, so the files are the
same on every run (ResNet-18's ~45 MB of weights are generated, never checked in).
ONNX Runtime (CPU execution provider, graph optimizations off) computes the expected
outputs. Kiln's test testsuite/tests/onnx_models.rs reads the directory named by the
environment variable KILN_ORT_MODELS (.ci/run sets it).
"""

import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
SEED = 20240501


class Builder:
    """Collects nodes and initializers of one graph."""

    def __init__(self, rng):
        self.rng = rng
        self.nodes = []
        self.inits = []

    def init(self, name, value):
        """Adds an initializer and returns its name."""
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op, inputs, name, **attrs):
        """Adds a node with one output named after the node and returns that name."""
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def randn(self, shape, std):
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def uniform(self, shape, lo, hi):
        return self.rng.uniform(lo, hi, shape).astype(np.float32)


def conv_bn(b, x, name, cin, cout, k, stride, relu):
    """Conv (no bias, He-initialized) + BatchNormalization (+ Relu)."""
    w = b.init(f"{name}.weight", b.randn((cout, cin, k, k), np.sqrt(2.0 / (cin * k * k))))
    y = b.node(
        "Conv",
        [x, w],
        f"{name}",
        kernel_shape=[k, k],
        strides=[stride, stride],
        pads=[k // 2] * 4,
    )
    bn = f"{name}.bn"
    gamma = b.init(f"{bn}.weight", b.uniform((cout,), 0.5, 1.0))
    beta = b.init(f"{bn}.bias", b.randn((cout,), 0.1))
    mean = b.init(f"{bn}.running_mean", b.randn((cout,), 0.1))
    var = b.init(f"{bn}.running_var", b.uniform((cout,), 0.8, 1.5))
    y = b.node("BatchNormalization", [y, gamma, beta, mean, var], bn, epsilon=1e-5)
    if relu:
        y = b.node("Relu", [y], f"{name}.relu")
    return y


def basic_block(b, x, name, cin, cout, stride):
    """torchvision's BasicBlock: two 3x3 conv + bn, identity or 1x1 downsample."""
    y = conv_bn(b, x, f"{name}.conv1", cin, cout, 3, stride, relu=True)
    y = conv_bn(b, y, f"{name}.conv2", cout, cout, 3, 1, relu=False)
    if stride != 1 or cin != cout:
        x = conv_bn(b, x, f"{name}.downsample", cin, cout, 1, stride, relu=False)
    y = b.node("Add", [y, x], f"{name}.add")
    return b.node("Relu", [y], f"{name}.relu")


def resnet18(rng):
    b = Builder(rng)
    x = conv_bn(b, "input", "conv1", 3, 64, 7, 2, relu=True)
    x = b.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    cin = 64
    for stage, cout in enumerate([64, 128, 256, 512], start=1):
        for block in range(2):
            stride = 2 if stage > 1 and block == 0 else 1
            x = basic_block(b, x, f"layer{stage}.{block}", cin, cout, stride)
            cin = cout
    x = b.node("GlobalAveragePool", [x], "avgpool")
    x = b.node("Flatten", [x], "flatten", axis=1)
    w = b.init("fc.weight", b.randn((1000, 512), np.sqrt(1.0 / 512)))
    bias = b.init("fc.bias", b.randn((1000,), 0.01))
    b.node("Gemm", [x, w, bias], "output", transB=1)
    graph = helper.make_graph(
        b.nodes,
        "resnet18",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1000])],
        b.inits,
    )
    x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    return graph, x


def bert_encoder(rng, seq=16, hidden=64, heads=4, ffn=256):
    b = Builder(rng)
    d = hidden // heads
    std = np.sqrt(1.0 / hidden)

    def linear(x, name, cin, cout, s):
        w = b.init(f"{name}.weight", b.randn((cin, cout), s))
        bias = b.init(f"{name}.bias", b.randn((cout,), 0.02))
        y = b.node("MatMul", [x, w], f"{name}.matmul")
        return b.node("Add", [y, bias], f"{name}.add")

    def layer_norm(x, name):
        gamma = b.init(f"{name}.weight", b.uniform((hidden,), 0.8, 1.2))
        beta = b.init(f"{name}.bias", b.randn((hidden,), 0.05))
        return b.node("LayerNormalization", [x, gamma, beta], name, axis=-1, epsilon=1e-12)

    heads_shape = b.init("heads_shape", np.array([1, seq, heads, d], dtype=np.int64))
    merged_shape = b.init("merged_shape", np.array([1, seq, hidden], dtype=np.int64))

    def to_heads(x, name, perm):
        x = b.node("Reshape", [x, heads_shape], f"{name}.reshape")
        return b.node("Transpose", [x], f"{name}.transpose", perm=perm)

    x = "input"
    q = to_heads(linear(x, "attn.query", hidden, hidden, std), "q", [0, 2, 1, 3])
    k = to_heads(linear(x, "attn.key", hidden, hidden, std), "k", [0, 2, 3, 1])
    v = to_heads(linear(x, "attn.value", hidden, hidden, std), "v", [0, 2, 1, 3])
    scores = b.node("MatMul", [q, k], "attn.scores")
    scale = b.init("attn.scale", np.array(np.sqrt(d), dtype=np.float32))
    scores = b.node("Div", [scores, scale], "attn.scaled")
    probs = b.node("Softmax", [scores], "attn.softmax", axis=-1)
    ctx = b.node("MatMul", [probs, v], "attn.context")
    ctx = b.node("Transpose", [ctx], "attn.context.transpose", perm=[0, 2, 1, 3])
    ctx = b.node("Reshape", [ctx, merged_shape], "attn.context.reshape")
    out = linear(ctx, "attn.output", hidden, hidden, std)
    h = layer_norm(b.node("Add", [out, x], "attn.residual"), "attn.layer_norm")

    f = linear(h, "ffn.intermediate", hidden, ffn, std)
    # GELU(f) = 0.5 * f * (1 + erf(f / sqrt(2))), as BERT exports before opset 20.
    sqrt2 = b.init("gelu.sqrt2", np.array(np.sqrt(2.0), dtype=np.float32))
    one = b.init("gelu.one", np.array(1.0, dtype=np.float32))
    half = b.init("gelu.half", np.array(0.5, dtype=np.float32))
    g = b.node("Div", [f, sqrt2], "gelu.div")
    g = b.node("Erf", [g], "gelu.erf")
    g = b.node("Add", [g, one], "gelu.add")
    g = b.node("Mul", [f, g], "gelu.mul")
    g = b.node("Mul", [g, half], "gelu.half_mul")
    f = linear(g, "ffn.output", ffn, hidden, np.sqrt(1.0 / ffn))
    y = layer_norm(b.node("Add", [f, h], "ffn.residual"), "ffn.layer_norm")
    b.nodes.append(helper.make_node("Identity", [y], ["output"], name="output"))

    graph = helper.make_graph(
        b.nodes,
        "bert_encoder",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, seq, hidden])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, seq, hidden])],
        b.inits,
    )
    x = rng.standard_normal((1, seq, hidden)).astype(np.float32)
    return graph, x


def save(out_dir, name, graph, x):
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="kiln make_ort_models.py",
    )
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    options = ort.SessionOptions()
    # The unoptimized graph, so ORT computes what the model says, not a fused variant.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    (y,) = session.run(None, {graph.input[0].name: x})
    case = os.path.join(out_dir, name)
    data = os.path.join(case, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    onnx.save(model, os.path.join(case, "model.onnx"))
    with open(os.path.join(data, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x, graph.input[0].name).SerializeToString())
    with open(os.path.join(data, "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(y, graph.output[0].name).SerializeToString())
    print(
        f"{name}: {len(graph.node)} nodes, output {y.shape} "
        f"(|y| max {np.abs(y).max():.3f}), onnxruntime {ort.__version__}"
    )


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    rng = np.random.default_rng(SEED)
    save(out_dir, "resnet18", *resnet18(rng))
    save(out_dir, "bert_encoder", *bert_encoder(rng))


if __name__ == "__main__":
    main()
