"""``python -m tests.fakes.gitlab --state-dir DIR --root-token TOKEN``:
run the GitLab stand-in; its base URL is printed as the first line of
stdout (``{"url": "http://127.0.0.1:<port>"}``). SIGTERM stops it."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from tests.fakes.gitlab.server import StandIn


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog='gitlab-standin', description=__doc__)
    parser.add_argument('--state-dir', required=True)
    parser.add_argument('--root-token', required=True)
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--port', type=int, default=0)
    args = parser.parse_args(argv)
    standin = StandIn(args.state_dir, args.root_token, args.host, args.port)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=standin.shutdown,
                                                              daemon=True).start())
    print(json.dumps({'url': standin.url}), flush=True)
    standin.serve_forever()
    return 0


if __name__ == '__main__':
    sys.exit(main())
