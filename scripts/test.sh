#!/usr/bin/env bash
# Set up everything (idempotent), then lint, type-check and run the whole test suite
# (unit tests, and integration tests that attach real probes to a real llama.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Every metric runs on both engines wherever a real trace_processor is at hand: the one beside
# the clone (../shared/tools), or beside the checkout it was cloned from (`git clone . /tmp/x`),
# else the perfetto API's own, which setup downloaded and cached.
if [ -z "${PROFINFER_TP_BIN:-}" ]; then
    origin=$(git config --get remote.origin.url || true)
    if [ -x ../shared/tools/trace-processor ]; then
        PROFINFER_TP_BIN=$(../shared/tools/trace-processor)
    elif [ -d "$origin" ] && [ -x "$origin/../shared/tools/trace-processor" ]; then
        PROFINFER_TP_BIN=$("$origin/../shared/tools/trace-processor")
    else
        PROFINFER_TP_BIN=$(.venv/bin/python scripts/trace_processor.py)
    fi
fi
export PROFINFER_TP_BIN
echo "== trace_processor for the tests: ${PROFINFER_TP_BIN:-none (builtin engine only)}" >&2
exec .venv/bin/nox -s lint tests guest
