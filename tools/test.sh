#!/usr/bin/env bash
# The test command: installs what it needs, lints, then runs the suite.
#   tools/test.sh [pytest args...]
set -euo pipefail
top="$(cd "$(dirname "$0")/.." && pwd)"
cd "$top"
bash tools/install-deps.sh
echo "== ruff"
.venv/bin/ruff check zuul nodepool tests benchmarks tools
echo "== pytest"
# The slowest tests are listed at the end: where the suite's time goes.
exec .venv/bin/python -m pytest -p no:cacheprovider --durations=15 "$@"
