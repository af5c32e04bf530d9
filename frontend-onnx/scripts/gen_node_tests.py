#!/usr/bin/env python3
"""Writes ONNX's backend node test cases in ONNX's standard layout.

Usage: gen_node_tests.py OUT_DIR

For every case that ``onnx.backend.test.case.node.collect_testcases()`` yields, writes
``OUT_DIR/test_x/model.onnx`` and ``OUT_DIR/test_x/test_data_set_0/input_N.pb`` and
``output_N.pb`` (serialized TensorProto, or SequenceProto / OptionalProto / MapProto for
non-tensor values), as ``onnx``'s own ``backend-test-tools generate-data`` does. Then
copies the ready-made cases the package ships in the same layout under
``onnx/backend/test/data/pytorch-converted`` and ``pytorch-operator`` into ``OUT_DIR``
(their names, ``test_Conv2d`` and ``test_operator_add_broadcast``, do not clash with the
node tests'). Kiln's
conformance runner (testsuite/tests/onnx_node.rs) reads the directory named by the
environment variable KILN_ONNX_NODE_TESTS. Pin the onnx version (.ci/run does): the
checked-in manifest lists the cases of one version.
"""

import os
import shutil
import sys

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.test.case import node


def serialize(value, value_info):
    """The bytes of one input or output value as ONNX's test data stores it."""
    ty = value_info.type
    name = value_info.name
    if ty.HasField("map_type"):
        return numpy_helper.from_dict(value, name).SerializeToString()
    if ty.HasField("sequence_type"):
        return numpy_helper.from_list(value, name).SerializeToString()
    if ty.HasField("optional_type"):
        return numpy_helper.from_optional(value, name).SerializeToString()
    if isinstance(value, onnx.TensorProto):
        return value.SerializeToString()
    return numpy_helper.from_array(np.asarray(value), name).SerializeToString()


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    cases = node.collect_testcases()
    written = 0
    for case in cases:
        case_dir = os.path.join(out, case.name)
        if os.path.exists(case_dir):
            shutil.rmtree(case_dir)
        os.makedirs(case_dir)
        with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        graph = case.model.graph
        for i, (inputs, outputs) in enumerate(case.data_sets):
            data_dir = os.path.join(case_dir, f"test_data_set_{i}")
            os.makedirs(data_dir)
            for j, value in enumerate(inputs):
                with open(os.path.join(data_dir, f"input_{j}.pb"), "wb") as f:
                    f.write(serialize(value, graph.input[j]))
            for j, value in enumerate(outputs):
                with open(os.path.join(data_dir, f"output_{j}.pb"), "wb") as f:
                    f.write(serialize(value, graph.output[j]))
        written += 1
    print(f"wrote {written} ONNX node test cases (onnx {onnx.__version__}) to {out}")
    node_names = {c.name for c in cases}
    data = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    for kind in ("pytorch-converted", "pytorch-operator"):
        src = os.path.join(data, kind)
        names = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
        for name in names:
            if name in node_names:
                sys.exit(f"{kind}/{name} has the name of a node test case")
            dst = os.path.join(out, name)
            if os.path.exists(dst):
                shutil.rmtree(dst)
            shutil.copytree(os.path.join(src, name), dst)
        print(f"copied {len(names)} {kind} cases to {out}")


if __name__ == "__main__":
    main()
