#!/usr/bin/env bash
# Runs every kiln fuzz target for SECONDS each (default 60), one after another, from the
# checked-in seeds (fuzz/seeds/TARGET) plus the corpus earlier runs grew (fuzz/corpus,
# not committed). Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
# A crash, timeout, leak or OOM stops the run with libFuzzer's report and the input
# under fuzz/artifacts/TARGET/; turn it into a regression test at the loader it broke.
#
#   fuzz/run.sh 60             # the short run .ci/run makes
#   fuzz/run.sh 3600           # the documented long run (RELIABILITY.md)
#   TARGETS="npy onnx" fuzz/run.sh 30
set -euo pipefail
secs=${1:-60}
cd "$(dirname "$0")"
# Loaders refuse anything beyond this budget, so libFuzzer's own limit is never hit by
# a request kiln would have refused anyway.
export KILN_MEMORY_LIMIT=${KILN_MEMORY_LIMIT:-256M}
targets=${TARGETS:-onnx text_ir loop_ir params module npy}
cargo +nightly fuzz build
for t in ${targets}; do
    mkdir -p "corpus/$t"
    echo "== fuzz target $t for ${secs}s"
    cargo +nightly fuzz run "$t" "corpus/$t" "seeds/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -timeout=30 -max_len=65536 \
        -print_final_stats=1 2>&1 | grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|==|SUMMARY|INFO: .*(crash|leak))' || true
    # Slow units (over libFuzzer's 10 s report threshold, under -timeout) are kept for a
    # look but do not fail the run; crashes, timeouts, leaks and OOMs do.
    if find "artifacts/$t" -name 'crash-*' -o -name 'timeout-*' -o -name 'leak-*' \
        -o -name 'oom-*' 2>/dev/null | grep -q .; then
        echo "fuzz target $t left failures in fuzz/artifacts/$t" >&2
        exit 1
    fi
done
