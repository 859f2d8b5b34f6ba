#!/usr/bin/python
"""Zuul's ``command`` module: Ansible's ``command`` (and, through the
``shell`` action, ``shell``) with every line of output also written, as
the node prints it, to the node's console log for live streaming.

Ansible's ``command`` and ``shell`` actions run ``ansible.legacy.command``,
which finds this file first on the executor's ``library`` path.  It takes
every argument of Ansible's own module with the same meaning and result
keys (``cmd``, ``rc``, ``stdout``, ``stderr``, ``start``, ``end``,
``delta``, ``msg``; ``creates``/``removes``; check mode), ``warn``
(which Ansible 2.14 removed; accepted and ignored, for older roles), plus:

``zuul_log_id``
    When given, every output line is appended to
    ``/tmp/console-<zuul_log_id>.log`` as ``<time> | <line>`` (time with
    microseconds, taken when the line was read), and the log ends with
    ``[Zuul] Task exit code: <rc>``.  The ``zuul_console`` daemon on the
    node serves that file to the executor (port 19885).
``zuul_ansible_split_streams``
    False merges stderr into stdout at the source, in the order the
    command wrote them (the job's ``ansible-split-streams: false``, the
    default); true keeps them apart, as Ansible does.

This module runs on the node, shipped by Ansible: it imports only the
standard library and ``ansible.module_utils``.
"""

from __future__ import annotations

import datetime
import glob
import os
import re
import selectors
import shlex
import subprocess
import traceback

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible.module_utils.common.text.converters import to_bytes, to_native, to_text
except ImportError:  # pragma: no cover - older ansible
    from ansible.module_utils._text import to_bytes, to_native, to_text

CONSOLE_PATH = '/tmp/console-{log_id}.log'
EXIT_MARKER = '[Zuul] Task exit code: {rc}\n'
TIME_FORMAT = '%Y-%m-%d %H:%M:%S.%f'
# A line longer than this is written to the console in pieces.
MAX_LINE = 65536
READ_SIZE = 32768
_UNSAFE_ID = re.compile(r'[^A-Za-z0-9._-]')


def console_file_name(log_id: str) -> str:
    """The console log of ``log_id``: always a file directly in /tmp."""
    return CONSOLE_PATH.format(log_id=_UNSAFE_ID.sub('_', log_id))


class Console:
    """The console log of one command: lines stamped as they come."""

    def __init__(self, log_id):
        self.fd = None
        self.partial = {}
        if not log_id:
            return
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, 'O_NOFOLLOW', 0) | \
            getattr(os, 'O_CLOEXEC', 0)
        try:
            self.fd = os.open(console_file_name(log_id), flags, 0o644)
        except OSError:
            self.fd = None  # no live log; the output still comes with the result

    def _write(self, data: bytes) -> None:
        if self.fd is None:
            return
        try:
            while data:
                data = data[os.write(self.fd, data):]
        except OSError:
            self.close()

    def _stamp(self, line: bytes) -> None:
        stamp = datetime.datetime.now().strftime(TIME_FORMAT).encode()
        self._write(stamp + b' | ' + line)

    def feed(self, key, data: bytes) -> None:
        """Bytes read from one stream (``key``); whole lines are written."""
        if self.fd is None:
            return
        buf = self.partial.get(key, b'') + data
        while True:
            cut = buf.find(b'\n')
            if cut < 0:
                if len(buf) >= MAX_LINE:
                    self._stamp(buf[:MAX_LINE] + b'\n')
                    buf = buf[MAX_LINE:]
                    continue
                break
            self._stamp(buf[:cut + 1])
            buf = buf[cut + 1:]
        self.partial[key] = buf

    def finish(self, rc) -> None:
        for key in list(self.partial):
            if self.partial[key]:
                self._stamp(self.partial[key] + b'\n')
        self.partial = {}
        self._write(b'%s | %s' % (datetime.datetime.now().strftime(TIME_FORMAT).encode(),
                                  EXIT_MARKER.format(rc=rc).encode()))
        self.close()

    def close(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None


def _environment(module) -> dict:
    """What Ansible's run_command gives a command: the module's
    environment, its locale update, without AnsiballZ's Python paths."""
    env = os.environ.copy()
    env.update(getattr(module, 'run_command_environ_update', None) or {})
    if 'PYTHONPATH' in env:
        paths = [p for p in env['PYTHONPATH'].split(':')
                 if p and not p.endswith('/ansible_modlib.zip') and not p.endswith('/debug_dir')]
        if paths:
            env['PYTHONPATH'] = ':'.join(paths)
        else:
            del env['PYTHONPATH']
    return env


def _popen_args(module, args, shell: bool, executable, expand: bool):
    """(argv or script, Popen keyword arguments) as Ansible runs them."""
    if shell:
        if isinstance(args, list):
            args = ' '.join(shlex.quote(a) for a in args)
        script = to_bytes(args, errors='surrogate_or_strict')
        interpreter = executable or getattr(module, '_shell', None)
        if interpreter and interpreter != '/bin/sh':
            return [to_bytes(interpreter, errors='surrogate_or_strict'), b'-c', script], {}
        return script, {'shell': True}
    if isinstance(args, (bytes, str)):
        args = shlex.split(to_text(args, errors='surrogateescape'))
    if expand:
        args = [os.path.expanduser(os.path.expandvars(a)) for a in args if a is not None]
    return [to_bytes(a, errors='surrogate_or_strict') for a in args if a is not None], {}


def run_streaming(module, args, shell, executable, expand, stdin, merge, console):
    """Run the command; return (rc, stdout bytes, stderr bytes).  Output
    is read as it comes (into ``console``); like Ansible's run_command,
    reading stops once the command has exited and its pipes are drained,
    even if a process it started in the background keeps them open."""
    argv, extra = _popen_args(module, args, shell, executable, expand)
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE if stdin is not None else None,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge else subprocess.PIPE,
        close_fds=True, env=_environment(module), **extra)
    streams = {proc.stdout: b''}
    if not merge:
        streams[proc.stderr] = b''
    selector = selectors.DefaultSelector()
    for pipe in streams:
        os.set_blocking(pipe.fileno(), False)
        selector.register(pipe, selectors.EVENT_READ)
    if stdin is not None:
        try:
            proc.stdin.write(stdin)
            proc.stdin.close()
        except OSError:
            pass
    while True:
        events = selector.select(1)
        for key, _ in events:
            chunk = key.fileobj.read(READ_SIZE)
            if chunk is None:
                continue
            if not chunk:
                selector.unregister(key.fileobj)
                continue
            streams[key.fileobj] += chunk
            console.feed(key.fileobj, chunk)
        if (not events or not selector.get_map()) and proc.poll() is not None:
            break
        if not selector.get_map():
            proc.wait()
            break
    selector.close()
    for pipe in streams:
        pipe.close()
    err = b'' if merge else streams[proc.stderr]
    return proc.returncode, streams[proc.stdout], err


def _skip_message(module, creates, removes):
    would = 'Would' if module.check_mode else 'Did'
    if creates and glob.glob(creates):
        return (f"{would} not run command since '{creates}' exists",
                f'skipped, since {creates} exists')
    if removes and not glob.glob(removes):
        return (f"{would} not run command since '{removes}' does not exist",
                f'skipped, since {removes} does not exist')
    return None


ARGUMENT_SPEC = dict(
    _raw_params=dict(),
    _uses_shell=dict(type='bool', default=False),
    cmd=dict(),
    argv=dict(type='list', elements='str'),
    chdir=dict(type='path'),
    executable=dict(),
    expand_argument_vars=dict(type='bool', default=True),
    creates=dict(type='path'),
    removes=dict(type='path'),
    stdin=dict(required=False),
    stdin_add_newline=dict(type='bool', default=True),
    strip_empty_ends=dict(type='bool', default=True),
    # Ansible 2.14 dropped it; roles written before (zuul-jobs'
    # of 2019 pass ``warn: false``) keep working: accepted, unused.
    warn=dict(type='bool', default=False),
    zuul_log_id=dict(type='str'),
    zuul_ansible_split_streams=dict(type='bool', default=True),
)


def _finish(module, r, rc, out, err, start, end, strip) -> None:
    """Exit with the result, as Ansible's module reports it."""
    r.update(rc=rc, start=to_text(start), end=to_text(end), delta=to_text(end - start))
    r['stdout'] = to_text(out, errors='surrogate_or_strict')
    r['stderr'] = to_text(err, errors='surrogate_or_strict')
    if strip:
        r['stdout'] = r['stdout'].rstrip('\r\n')
        r['stderr'] = r['stderr'].rstrip('\r\n')
    if rc != 0:
        r['msg'] = 'non-zero return code'
        module.fail_json(**r)
    module.exit_json(**r)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC,
                           required_one_of=[['_raw_params', 'cmd', 'argv']],
                           mutually_exclusive=[['_raw_params', 'cmd', 'argv']],
                           supports_check_mode=True)
    p = module.params
    shell = p['_uses_shell']
    executable = p['executable']
    args = p['_raw_params'] or p['cmd']
    r = {'changed': False, 'stdout': '', 'stderr': '', 'rc': None, 'cmd': None,
         'start': None, 'end': None, 'delta': None, 'msg': ''}
    if not shell and executable:
        module.warn(f"As of Ansible 2.4, the parameter 'executable' is no longer supported "
                    f"with the 'command' module. Not using '{executable}'.")
        executable = None
    if not shell and args:
        args = shlex.split(args)
    args = args or p['argv']
    if isinstance(args, (list, tuple)):
        args = [to_native(a, errors='surrogate_or_strict', nonstring='simplerepr')
                for a in args]
    r['cmd'] = args
    if p['chdir']:
        try:
            os.chdir(to_bytes(p['chdir'], errors='surrogate_or_strict'))
        except OSError as exc:
            r['msg'] = f'Unable to change directory before execution: {exc}'
            module.fail_json(**r, exception=traceback.format_exc())
    skipped = _skip_message(module, p['creates'], p['removes'])
    if skipped:
        r['msg'], r['stdout'] = skipped
        r['rc'] = 0
        module.exit_json(**r)
    r['changed'] = True
    if module.check_mode:
        r['rc'] = 0
        r['msg'] = 'Command would have run if not in check mode'
        if p['creates'] is None and p['removes'] is None:
            r['skipped'] = True
            r['changed'] = False
        module.exit_json(**r)
    stdin = p['stdin'] or None     # as Ansible: an empty stdin is no stdin
    if stdin is not None:
        stdin = to_bytes(stdin + ('\n' if p['stdin_add_newline'] else ''),
                         errors='surrogate_or_strict')
    console = Console(p['zuul_log_id'])
    start = datetime.datetime.now()
    try:
        rc, out, err = run_streaming(module, args, shell, executable,
                                     p['expand_argument_vars'], stdin,
                                     not p['zuul_ansible_split_streams'], console)
    except OSError as exc:
        console.finish(exc.errno)
        module.fail_json(rc=exc.errno, stdout='', stderr='',
                         msg=f'Error executing command: {exc}', cmd=args,
                         exception=traceback.format_exc())
    console.finish(rc)
    _finish(module, r, rc, out, err, start, datetime.datetime.now(), p['strip_empty_ends'])


if __name__ == '__main__':
    main()
