#!/usr/bin/env python3
"""Makes executor/tests/fixtures/tvm_params.params with the real TVM, for kiln's params tests.

The file is written by `tvm.runtime.save_param_dict` (TVM's `SaveParams`), so kiln's
`load_params` / `save_params` are checked against bytes kiln did not produce. Next to it,
`tvm_params.json` records, per tensor, the dtype, shape and values (and the TVM version),
so the Rust test can check what it loaded without numpy.

Set up and run (from the repository root):

    python3 -m venv /tmp/tvmvenv
    /tmp/tvmvenv/bin/pip install apache-tvm numpy
    /tmp/tvmvenv/bin/python executor/scripts/make_params_fixture.py

Values are deterministic (no random numbers), and names are inserted in sorted order:
TVM keeps insertion order, kiln's `BTreeMap` keeps sorted order, so the two files agree
byte for byte.
"""

import json
import os
import sys

import numpy as np
import tvm

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "..", "tests", "fixtures")


def tensors():
    """Name -> numpy array: every dtype kiln supports, scalar / 1-D / 3-D / empty shapes."""
    return {
        # 3-D float32 with negative, fractional and large values.
        "conv1.weight": (np.arange(24, dtype=np.float32).reshape(2, 3, 4) * 0.25 - 3.0)
        * np.float32(1.5),
        # 1-D float16, including values only just representable in half precision.
        "fc.bias": np.array([0.0, -1.5, 65504.0, 0.000061035156, 3.140625], dtype=np.float16),
        # 1-D int8 spanning the whole range.
        "int8.vec": np.array([-128, -1, 0, 1, 42, 127, -77], dtype=np.int8),
        # 3-D uint8.
        "uint8.cube": (np.arange(8, dtype=np.uint8) * 31).reshape(2, 2, 2),
        # Scalar int32.
        "int32.scalar": np.array(-123456789, dtype=np.int32),
        # 1-D int64 with values beyond 32 bits.
        "int64.vec": np.array([-(2**62), -1, 0, 2**40 + 7], dtype=np.int64),
        # 2-D bool (TVM >= 0.20 stores it as DLPack kDLBool, code 6, 8 bits).
        "mask": np.array([[True, False, True], [False, False, True]]),
        # An empty tensor: 0 elements, 0 data bytes.
        "empty": np.zeros((0, 3), dtype=np.float32),
        # A non-ASCII name (names are byte strings; kiln requires UTF-8).
        "w\u00e9ight.\u00fcnicode": np.array([7.0], dtype=np.float32),
    }


def main():
    arrays = tensors()
    params = {}
    for name in sorted(arrays):
        params[name] = tvm.runtime.tensor(arrays[name])
    blob = bytes(tvm.runtime.save_param_dict(params))

    # TVM must read back what it wrote, with the same values.
    loaded = tvm.runtime.load_param_dict(bytearray(blob))
    assert list(loaded.keys()) == sorted(arrays), list(loaded.keys())
    for name, arr in arrays.items():
        np.testing.assert_array_equal(loaded[name].numpy(), arr)

    manifest = {
        "tvm_version": tvm.__version__,
        "numpy_version": np.__version__,
        "tensors": [
            {
                "name": name,
                "dtype": str(arrays[name].dtype),
                "shape": list(arrays[name].shape),
                "values": [v.item() for v in arrays[name].reshape(-1)],
            }
            for name in sorted(arrays)
        ],
    }
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, "tvm_params.params"), "wb") as f:
        f.write(blob)
    with open(os.path.join(OUT_DIR, "tvm_params.json"), "w") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {len(blob)} bytes with TVM {tvm.__version__}", file=sys.stderr)


if __name__ == "__main__":
    main()
