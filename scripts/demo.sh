#!/usr/bin/env bash
# Set up everything (idempotent), then record Gemma-3-270M generating 32 tokens on 2 threads
# into a Perfetto trace and print its summary.   usage: scripts/demo.sh [TRACE]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
eval "$(.venv/bin/python scripts/assets.py)"
out=${1:-gemma-3-270m.pftrace}
.venv/bin/profinfer-perfetto record -o "$out" -- \
    "$LLAMA_SHARED_BIN/llama-completion" -m "$MODEL_GEMMA_3_270M" \
    -p "Paris is the capital of" -n 32 -t 2 -no-cnv --no-warmup -s 1 </dev/null
