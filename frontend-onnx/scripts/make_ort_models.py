#!/usr/bin/env python3
"""Builds ONNX models with random weights and saves ONNX Runtime's outputs for them.

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
  residual Add, LayerNormalization;
* one small model per architecture family people export (each function's docstring says
  what it holds): ``rotary_decoder`` (Sin/Cos rotary embeddings), ``einsum_attention``,
  ``loop_rnn`` (a Loop with a constant trip count) and ``detection_head`` (TopK + Gather).

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


def rotary_decoder(rng, seq=8, hidden=32, heads=2):
    """A decoder block as LLMs export it: RMSNorm, Q/K/V projections, rotary position
    embeddings (Sin and Cos of position_ids times the inverse frequencies, rotate-half),
    causal attention (an additive mask), output projection, residual, RMSNorm and a
    SiLU-gated MLP, residual. Inputs: hidden states (1, seq, hidden) and position_ids
    (1, seq) int64."""
    b = Builder(rng)
    d = hidden // heads
    std = np.sqrt(1.0 / hidden)

    def rms_norm(x, name):
        g = b.init(f"{name}.weight", b.uniform((hidden,), 0.8, 1.2))
        sq = b.node("Mul", [x, x], f"{name}.sq")
        ms = b.node("ReduceMean", [sq], f"{name}.mean", axes=[-1], keepdims=1)
        eps = b.init(f"{name}.eps", np.array(1e-6, dtype=np.float32))
        ms = b.node("Add", [ms, eps], f"{name}.add_eps")
        r = b.node("Sqrt", [ms], f"{name}.sqrt")
        y = b.node("Div", [x, r], f"{name}.div")
        return b.node("Mul", [y, g], name)

    def proj(x, name, cin, cout):
        w = b.init(f"{name}.weight", b.randn((cin, cout), std))
        return b.node("MatMul", [x, w], name)

    # Rotary tables: angles = position_ids[..., None] * inv_freq, duplicated halves.
    inv_freq = 1.0 / (10000.0 ** (np.arange(0, d, 2, dtype=np.float32) / d))
    inv = b.init("rope.inv_freq", inv_freq.reshape(1, 1, d // 2).astype(np.float32))
    pos = b.node("Cast", ["position_ids"], "rope.pos", to=TensorProto.FLOAT)
    pos = b.node("Unsqueeze", [pos, b.init("rope.axes", np.array([-1], dtype=np.int64))], "rope.pos3")
    ang = b.node("Mul", [pos, inv], "rope.angles")
    ang = b.node("Concat", [ang, ang], "rope.angles2", axis=-1)
    unsq1 = b.init("rope.head_axis", np.array([1], dtype=np.int64))
    cos = b.node("Unsqueeze", [b.node("Cos", [ang], "rope.cos0"), unsq1], "rope.cos")
    sin = b.node("Unsqueeze", [b.node("Sin", [ang], "rope.sin0"), unsq1], "rope.sin")

    heads_shape = b.init("heads_shape", np.array([1, seq, heads, d], dtype=np.int64))
    merged_shape = b.init("merged_shape", np.array([1, seq, hidden], dtype=np.int64))
    half = d // 2
    starts0 = b.init("half.starts0", np.array([0], dtype=np.int64))
    ends0 = b.init("half.ends0", np.array([half], dtype=np.int64))
    starts1 = b.init("half.starts1", np.array([half], dtype=np.int64))
    ends1 = b.init("half.ends1", np.array([d], dtype=np.int64))
    last = b.init("half.axis", np.array([-1], dtype=np.int64))

    def heads_of(x, name):
        x = b.node("Reshape", [x, heads_shape], f"{name}.reshape")
        return b.node("Transpose", [x], f"{name}.transpose", perm=[0, 2, 1, 3])

    def rope(x, name):
        x1 = b.node("Slice", [x, starts0, ends0, last], f"{name}.x1")
        x2 = b.node("Slice", [x, starts1, ends1, last], f"{name}.x2")
        rot = b.node("Concat", [b.node("Neg", [x2], f"{name}.neg"), x1], f"{name}.rot", axis=-1)
        a = b.node("Mul", [x, cos], f"{name}.xcos")
        c = b.node("Mul", [rot, sin], f"{name}.rotsin")
        return b.node("Add", [a, c], name)

    x = "input"
    h = rms_norm(x, "attn_norm")
    q = rope(heads_of(proj(h, "q_proj", hidden, hidden), "q"), "q_rope")
    k = rope(heads_of(proj(h, "k_proj", hidden, hidden), "k"), "k_rope")
    v = heads_of(proj(h, "v_proj", hidden, hidden), "v")
    kt = b.node("Transpose", [k], "k_t", perm=[0, 1, 3, 2])
    scores = b.node("MatMul", [q, kt], "scores")
    scale = b.init("scale", np.array(1.0 / np.sqrt(d), dtype=np.float32))
    scores = b.node("Mul", [scores, scale], "scores_scaled")
    mask = np.triu(np.full((seq, seq), -1e9, dtype=np.float32), k=1)
    scores = b.node("Add", [scores, b.init("causal_mask", mask)], "scores_masked")
    probs = b.node("Softmax", [scores], "probs", axis=-1)
    ctx = b.node("MatMul", [probs, v], "context")
    ctx = b.node("Transpose", [ctx], "context_t", perm=[0, 2, 1, 3])
    ctx = b.node("Reshape", [ctx, merged_shape], "context_merged")
    h1 = b.node("Add", [proj(ctx, "o_proj", hidden, hidden), x], "attn_residual")
    m = rms_norm(h1, "mlp_norm")
    gate = proj(m, "gate_proj", hidden, 2 * hidden)
    silu = b.node("Mul", [gate, b.node("Sigmoid", [gate], "gate_sigmoid")], "silu")
    up = proj(m, "up_proj", hidden, 2 * hidden)
    down = proj(b.node("Mul", [silu, up], "gated"), "down_proj", 2 * hidden, hidden)
    y = b.node("Add", [down, h1], "mlp_residual")
    b.nodes.append(helper.make_node("Identity", [y], ["output"], name="output"))
    graph = helper.make_graph(
        b.nodes,
        "rotary_decoder",
        [
            helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, seq, hidden]),
            helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, seq]),
        ],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, seq, hidden])],
        b.inits,
    )
    x = rng.standard_normal((1, seq, hidden)).astype(np.float32)
    # Positions far from zero, as in a long generation (rotary angles up to ~1000).
    positions = (np.arange(seq, dtype=np.int64) + 1000).reshape(1, seq)
    return graph, [x, positions]


def einsum_attention(rng, seq=8, hidden=32, heads=4):
    """Multi-head attention written with Einsum, as some exporters write it: projections
    "bsh,hnd->bsnd", scores "bqnd,bknd->bnqk", context "bnqk,bknd->bqnd", output
    "bqnd,ndh->bqh"."""
    b = Builder(rng)
    d = hidden // heads
    std = np.sqrt(1.0 / hidden)
    x = "input"

    def proj(name):
        w = b.init(f"{name}.weight", b.randn((hidden, heads, d), std))
        return b.node("Einsum", [x, w], name, equation="bsh,hnd->bsnd")

    q, k, v = proj("q"), proj("k"), proj("v")
    scores = b.node("Einsum", [q, k], "scores", equation="bqnd,bknd->bnqk")
    scale = b.init("scale", np.array(1.0 / np.sqrt(d), dtype=np.float32))
    probs = b.node("Softmax", [b.node("Mul", [scores, scale], "scaled")], "probs", axis=-1)
    ctx = b.node("Einsum", [probs, v], "context", equation="bnqk,bknd->bqnd")
    wo = b.init("o.weight", b.randn((heads, d, hidden), std))
    y = b.node("Einsum", [ctx, wo], "o", equation="bqnd,ndh->bqh")
    b.nodes.append(helper.make_node("Identity", [y], ["output"], name="output"))
    graph = helper.make_graph(
        b.nodes,
        "einsum_attention",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, seq, hidden])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, seq, hidden])],
        b.inits,
    )
    return graph, [rng.standard_normal((1, seq, hidden)).astype(np.float32)]


def loop_rnn(rng, steps=6, features=8, hidden=16):
    """An Elman RNN written as an ONNX Loop with a constant trip count (as
    torch.jit-scripted loops export): h = tanh(x[t] W + h U + b) for each step t, the
    last state and every state (the loop's scan output) concatenated."""
    b = Builder(rng)
    w = b.init("rnn.W", b.randn((features, hidden), np.sqrt(1.0 / features)))
    u = b.init("rnn.U", b.randn((hidden, hidden), np.sqrt(1.0 / hidden)))
    bias = b.init("rnn.b", b.randn((hidden,), 0.1))
    trip = b.init("trip_count", np.array(steps, dtype=np.int64))
    cond = b.init("cond", np.array(True))
    h0 = b.init("h0", np.zeros((1, hidden), dtype=np.float32))
    body_nodes = [
        helper.make_node("Gather", ["input", "t"], ["x_t"], axis=0),
        helper.make_node("MatMul", ["x_t", "rnn.W"], ["xw"]),
        helper.make_node("MatMul", ["h_in", "rnn.U"], ["hu"]),
        helper.make_node("Add", ["xw", "hu"], ["pre0"]),
        helper.make_node("Add", ["pre0", "rnn.b"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["h_out"]),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        helper.make_node("Identity", ["h_out"], ["h_scan"]),
    ]
    body = helper.make_graph(
        body_nodes,
        "rnn_step",
        [
            helper.make_tensor_value_info("t", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [1, hidden]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [1, hidden]),
            helper.make_tensor_value_info("h_scan", TensorProto.FLOAT, [1, hidden]),
        ],
    )
    b.nodes.append(
        helper.make_node("Loop", [trip, cond, h0], ["h_last", "h_all"], name="rnn", body=body)
    )
    flat = b.node("Reshape", ["h_all", b.init("flat", np.array([steps, hidden], dtype=np.int64))], "h_all_flat")
    y = b.node("Concat", [flat, "h_last"], "states", axis=0)
    b.nodes.append(helper.make_node("Identity", [y], ["output"], name="output"))
    graph = helper.make_graph(
        b.nodes,
        "loop_rnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [steps, 1, features])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [steps + 1, hidden])],
        b.inits,
    )
    return graph, [rng.standard_normal((steps, 1, features)).astype(np.float32)]


def detection_head(rng, anchors=32, features=16, k=6):
    """A detection head's post-processing: per-anchor scores (Sigmoid of a projection)
    and boxes (a projection), the TopK scores and the boxes they index (Gather), as
    (k, 5) rows of score and box. NonMaxSuppression, whose output length depends on the
    data, is not part of it: kiln refuses it (its shapes are static)."""
    b = Builder(rng)
    ws = b.init("score.weight", b.randn((features, 1), 0.5))
    wb = b.init("box.weight", b.randn((features, 4), 0.5))
    x = b.node("Reshape", ["input", b.init("flat", np.array([anchors, features], dtype=np.int64))], "anchors")
    scores = b.node("Sigmoid", [b.node("MatMul", [x, ws], "score.logits")], "scores")
    scores = b.node("Reshape", [scores, b.init("row", np.array([1, anchors], dtype=np.int64))], "score_row")
    boxes = b.node("MatMul", [x, wb], "boxes")
    kk = b.init("k", np.array([k], dtype=np.int64))
    b.nodes.append(helper.make_node("TopK", [scores, kk], ["top_scores", "top_idx"], name="topk", axis=1))
    idx = b.node("Reshape", ["top_idx", b.init("k_flat", np.array([k], dtype=np.int64))], "idx")
    picked = b.node("Gather", [boxes, idx], "picked", axis=0)
    col = b.node("Reshape", ["top_scores", b.init("k_col", np.array([k, 1], dtype=np.int64))], "score_col")
    y = b.node("Concat", [col, picked], "detections", axis=1)
    b.nodes.append(helper.make_node("Identity", [y], ["output"], name="output"))
    graph = helper.make_graph(
        b.nodes,
        "detection_head",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, anchors, features])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [k, 5])],
        b.inits,
    )
    return graph, [rng.standard_normal((1, anchors, features)).astype(np.float32)]


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
    xs = x if isinstance(x, list) else [x]
    (y,) = session.run(None, {i.name: v for i, v in zip(graph.input, xs)})
    case = os.path.join(out_dir, name)
    data = os.path.join(case, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    onnx.save(model, os.path.join(case, "model.onnx"))
    for j, (i, v) in enumerate(zip(graph.input, xs)):
        with open(os.path.join(data, f"input_{j}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, i.name).SerializeToString())
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
    save(out_dir, "rotary_decoder", *rotary_decoder(rng))
    save(out_dir, "einsum_attention", *einsum_attention(rng))
    save(out_dir, "loop_rnn", *loop_rnn(rng))
    save(out_dir, "detection_head", *detection_head(rng))


if __name__ == "__main__":
    main()
