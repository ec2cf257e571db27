#!/usr/bin/env bash
# Runs every benchmark on this machine and writes the JSON records into docs/.
set -euo pipefail
cd "$(dirname "$0")/.."
edgefd bench kernels --json docs/bench-kernels.json
edgefd bench engine --rounds 5 --json docs/bench-engine.json
OMP_NUM_THREADS=1 edgefd bench onnx --json docs/bench-onnx.json
