"""The build command: diskimage-builder's ``disk-image-create`` (or the
diskimage's ``dib-cmd``, called with the same arguments), its
environment, its log file and its timeout.

    disk-image-create -x -t FORMATS --checksum --no-tmpfs -o OUTPUT ELEMENT...

with ``ELEMENTS_PATH`` from ``elements-dir``, ``DIB_RELEASE`` from
``release`` and every ``env-vars`` entry in the environment.  The
command must leave ``OUTPUT.<format>`` for every format asked for.
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

from nodepool.config_diskimages import DiskImage

# The parent's death kills the build command too (a builder killed
# mid-build leaves no build running on behind its back).
_PDEATHSIG = ['setpriv', '--pdeathsig', 'KILL', '--'] if shutil.which('setpriv') else []


@dataclass
class BuildResult:
    ok: bool
    formats: list[str]
    reason: str = ''
    duration: float = 0.0
    #: The build command's exit code (None: it did not run, or was killed).
    rc: int | None = None


def build_command(image: DiskImage, formats: list[str], output: str) -> list[str]:
    return [*shlex.split(image.dib_cmd), '-x', '-t', ','.join(formats), '--checksum',
            '--no-tmpfs', '-o', output, *image.elements]


def build_environment(image: DiskImage, elements_dir: str | None,
                      base: dict | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    if elements_dir:
        env['ELEMENTS_PATH'] = elements_dir
    if image.release is not None:
        env['DIB_RELEASE'] = image.release
    env.update(image.env_vars)
    return env


def output_files(output: str, formats: list[str]) -> dict[str, str]:
    """format -> file, for the formats whose file exists."""
    return {f: f'{output}.{f}' for f in formats if os.path.isfile(f'{output}.{f}')}


def remove_formats(output: str, formats: list[str]) -> list[str]:
    """Delete the image files of ``formats`` (and their ``.md5`` and
    ``.sha256`` checksum files); returns what was removed."""
    removed = []
    for fmt in formats:
        for path in (f'{output}.{fmt}', f'{output}.{fmt}.md5', f'{output}.{fmt}.sha256'):
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
            removed.append(path)
    return removed


def remove_outputs(output: str) -> list[str]:
    """Delete ``OUTPUT.*`` (image files, checksums, leftovers of the
    command); returns what was removed."""
    removed = []
    for path in glob.glob(glob.escape(output) + '.*'):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
        removed.append(path)
    return removed


def run_build(image: DiskImage, formats: list[str], output: str, log_path: str,
              elements_dir: str | None, stop: threading.Event,
              kill_grace: float = 10.0) -> BuildResult:
    """Run the build command with its output in ``log_path``; bounded by
    the diskimage's build-timeout and by ``stop``."""
    cmd = build_command(image, formats, output)
    env = build_environment(image, elements_dir)
    start = time.monotonic()
    with open(log_path, 'a') as log:
        log.write(f'# {time.strftime("%Y-%m-%d %H:%M:%S")} building {image.name}: '
                  f'{shlex.join(cmd)}\n')
        for key in ('ELEMENTS_PATH', 'DIB_RELEASE', *image.env_vars):
            if key in env:
                log.write(f'#   {key}={env[key]}\n')
        log.flush()
        try:
            proc = subprocess.Popen([*_PDEATHSIG, *cmd], stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env,
                                    cwd=os.path.dirname(output) or None,
                                    start_new_session=True)
        except OSError as e:
            log.write(f'# cannot run {cmd[0]}: {e.strerror}\n')
            return BuildResult(False, [], f'cannot run {cmd[0]}: {e.strerror}')
        reason = _wait(proc, image.build_timeout, stop, kill_grace)
        duration = time.monotonic() - start
        if reason is None and proc.returncode != 0:
            reason = f'{os.path.basename(cmd[0])} exited with {proc.returncode}'
        produced = output_files(output, formats)
        if reason is None:
            missing = [f for f in formats if f not in produced]
            if missing:
                reason = (f'{os.path.basename(cmd[0])} left no '
                          f'{", ".join(os.path.basename(output) + "." + f for f in missing)}')
        log.write(f'# {time.strftime("%Y-%m-%d %H:%M:%S")} '
                  f'{"failed: " + reason if reason else "succeeded"} after {duration:.1f}s\n')
    rc = proc.returncode if proc.returncode is not None and proc.returncode >= 0 else None
    if reason:
        return BuildResult(False, [], reason, duration, rc or None)
    return BuildResult(True, [f for f in formats if f in produced], '', duration, rc)


def _wait(proc: subprocess.Popen, timeout: float, stop: threading.Event,
          kill_grace: float) -> str | None:
    """Wait for the command; kill its process group on timeout or stop.
    Returns why it was killed, or None if it exited by itself."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            proc.wait(timeout=max(0.0, min(left, 0.2)))
            return None
        except subprocess.TimeoutExpired:
            pass
        if stop.is_set():
            _kill(proc, kill_grace)
            return 'the builder is stopping'
        if time.monotonic() >= deadline:
            _kill(proc, kill_grace)
            return f'timed out after {timeout}s (build-timeout)'


def _kill(proc: subprocess.Popen, grace: float) -> None:
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
