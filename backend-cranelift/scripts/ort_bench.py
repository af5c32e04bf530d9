#!/usr/bin/env python3
"""Times an ONNX model on ONNX Runtime's CPU execution provider, the peer of `kiln bench`.

Usage: ort_bench.py MODEL.onnx [THREADS] [REPEAT] [NUMBER]

Random float32 inputs (seed 0; every dynamic dimension taken as 1), all graph
optimizations on, THREADS intra-op threads (default 2). Prints one line in the form of
`kiln bench`: median, min and max of REPEAT measurements (default 5), each the mean of
NUMBER runs (default 1), after one warm-up run. backend-cranelift/scripts/bench.sh runs
it on frontend-onnx/scripts/make_ort_models.py's ResNet-18 beside `kiln bench` of the
same file.
"""

import statistics
import sys
import time

import numpy as np
import onnxruntime as ort


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    repeat = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    number = int(sys.argv[4]) if len(sys.argv) > 4 else 1
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
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1000.0 / number)
    print(
        f"onnxruntime {ort.__version__} ({threads} threads): median {statistics.median(times):.3f} ms, "
        f"min {min(times):.3f} ms, max {max(times):.3f} ms over {repeat} x {number}"
    )


if __name__ == "__main__":
    main()
