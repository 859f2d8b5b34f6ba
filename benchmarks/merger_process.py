"""A merger in a process of its own, as zuul-merger runs at a site: the
benchmarks that measure a scheduler start these so that merges do not
compete with the scheduler for one interpreter lock. Fetches from a
directory of bare repositories (``<root>/<project>.git``).

    python -m benchmarks.merger_process GEAR_PORT GIT_DIR REPOS_ROOT [THREADS]

Runs until its standard input closes (the benchmark exits or stops it).
"""

from __future__ import annotations

import sys


def main(argv=None) -> None:
    from zuul.merger.merger import Merger
    from zuul.merger.repos import RepoUrlResolver
    from zuul.merger.server import MergeServer
    argv = sys.argv[1:] if argv is None else argv
    port, git_dir, repos = int(argv[0]), argv[1], argv[2]
    threads = int(argv[3]) if len(argv) > 3 else 4
    server = MergeServer([('127.0.0.1', port)],
                         Merger(git_dir, RepoUrlResolver({'gerrit': repos}),
                                git_user_email='zuul@example.org', git_user_name='Zuul'),
                         hostname=f'bench-merger-{git_dir.rstrip("/").rsplit("/", 1)[-1]}',
                         threads=threads)
    server.start()
    print('ready', flush=True)
    sys.stdin.read()
    server.stop()


if __name__ == '__main__':
    main()
