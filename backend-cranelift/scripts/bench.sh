#!/usr/bin/env bash
# Reproduces BENCHMARKS.md: ResNet-18 batch 1 and the MLP on `cpu -threads=2`, beside the
# graph-IR reference interpreter (`ref`), plus the machine. Run from the repository root.
# With PYTHON naming a python that has onnx and onnxruntime (for example
# `python3 -m venv /tmp/kiln-venv && /tmp/kiln-venv/bin/pip install onnx==1.23.2 numpy
# onnxruntime==1.31.1`, then PYTHON=/tmp/kiln-venv/bin/python), it also times the ONNX
# ResNet-18 on kiln's `cpu` and on ONNX Runtime (2 threads) side by side, in the same run
# (scripts/peer_bench.py, which does this for every peer model).
#
# `bench.sh --opt-levels [ROUNDS]` instead measures the graph optimizer (issue 6): the pass
# report (total and per-pass time) of `kiln inspect MODEL --emit opt --opt-level 3` for
# ResNet-18, ResNet-50, the MLP (and, with PYTHON, the ONNX BERT encoder block), then
# ResNet-18 batch 1 on `cpu -threads=2` at opt levels 0 and 3, alternating the levels,
# ROUNDS times (default 3). With BEFORE naming another `kiln` binary (for example a
# release build of main), its pass reports are taken too, alternating with this build's.
set -euo pipefail
cargo build --release -p kiln-cli
nproc
lscpu | head
uptime
kiln=./target/release/kiln

if [ "${1:-}" = "--opt-levels" ]; then
    rounds=${2:-3}
    models="zoo:resnet18 zoo:resnet50 zoo:mlp"
    dir=""
    if [ -n "${PYTHON:-}" ]; then
        dir=$(mktemp -d)
        "$PYTHON" frontend-onnx/scripts/make_ort_models.py "$dir"
        models="$models $dir/bert_encoder/model.onnx"
    fi
    for round in $(seq "$rounds"); do
        for model in $models; do
            for bin in "$kiln" ${BEFORE:-}; do
                echo "== optimize $model with $bin (round $round)"
                "$bin" inspect "$model" --emit opt --opt-level 3 | grep '^// '
            done
        done
    done
    for round in $(seq "$rounds"); do
        for level in 0 3; do
            echo "== resnet18 on cpu -threads=2 at --opt-level $level (round $round)"
            $kiln bench zoo:resnet18 --target "cpu -threads=2" --opt-level "$level" \
                --repeat 7 --number 1
        done
    done
    if [ -n "$dir" ]; then rm -rf "$dir"; fi
    uptime
    exit 0
fi

$kiln bench zoo:resnet18 --target "cpu -threads=2" --repeat 7 --number 1
$kiln bench zoo:resnet18 --target ref --repeat 5 --number 1
$kiln bench zoo:mlp --target "cpu -threads=2" --repeat 5 --number 100
$kiln bench zoo:mlp --target ref --repeat 5 --number 10
cargo bench -p kiln --bench mlp
if [ -n "${PYTHON:-}" ]; then
    "$PYTHON" scripts/peer_bench.py --kiln "$kiln" --threads 2 --rounds 2 --models resnet18
fi
uptime
