#!/usr/bin/env bash
# Reproduces BENCHMARKS.md: ResNet-18 batch 1 and the MLP on `cpu -threads=2`, beside the
# graph-IR reference interpreter (`ref`), plus the machine. Run from the repository root.
set -euo pipefail
cargo build --release -p kiln-cli
nproc
lscpu | head
./target/release/kiln bench zoo:resnet18 --target "cpu -threads=2" --repeat 5 --number 1
./target/release/kiln bench zoo:resnet18 --target ref --repeat 5 --number 1
./target/release/kiln bench zoo:mlp --target "cpu -threads=2" --repeat 5 --number 100
./target/release/kiln bench zoo:mlp --target ref --repeat 5 --number 10
cargo bench -p kiln-backend-cranelift --bench mlp
