#!/usr/bin/env bash
# Run the whole system on embedded defaults and walk changes through
# check and gate. Installs what it needs first.
set -euo pipefail
top="$(cd "$(dirname "$0")/.." && pwd)"
cd "$top"
bash tools/install-deps.sh
if [ "$(id -u)" != 0 ]; then
    exec sudo .venv/bin/python tools/quickstart.py "$@"
fi
exec .venv/bin/python tools/quickstart.py "$@"
