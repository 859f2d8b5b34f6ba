#!/usr/bin/env bash
# Run the whole system on embedded defaults and walk changes through
# check and gate. Installs what it needs first.
set -euo pipefail
top="$(cd "$(dirname "$0")/.." && pwd)"
cd "$top"
bash tools/install-deps.sh
if [ ! -f tools/quickstart.py ]; then
    echo "The quickstart scenario is not built yet: the scheduler, web and" >&2
    echo "code-review pieces it drives are still open issues. What works today:" >&2
    echo "  tools/test.sh                 the test suite on real services" >&2
    echo "  .venv/bin/zuul-admin --help   configuration checks" >&2
    echo "  .venv/bin/nodepool --help     the node pool" >&2
    exit 2
fi
exec .venv/bin/python tools/quickstart.py "$@"
