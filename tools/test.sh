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
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
