#!/usr/bin/env bash
# Set up everything (idempotent), then lint, type-check and run the whole test suite
# (unit tests, and integration tests that attach real probes to a real llama.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/nox -s lint tests
