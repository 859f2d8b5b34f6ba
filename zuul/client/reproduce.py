"""``zuul reproduce``: run a build again on your own machine (issue 32).

It fetches from zuul-web what the build ran with
(``/api/tenant/<tenant>/build/<uuid>/reproduction``: the frozen job, the
repo state the merger started from, the items merged speculatively, the
nodes, the git URLs; never a secret) and lays out a work directory the
way the executor lays out a job dir (zuul.executor.build does the work:
same merges, same checkouts, same inventory, same variables with their
unsafe markings), plus ``run.sh``, which runs the same playbooks in the
same order with the same ansible.cfg. Then it runs ``run.sh`` against
``--host``, against a network-namespace node it starts and stops
itself (``--local-node``), or not at all (``--prepare-only``).

Refused, with the reason: a build of a tenant the caller may not read
(zuul-web's answer), a build whose speculative state cannot be rebuilt
(a commit or a repository gone), and stored data naming a project,
host name or playbook that would put a file outside the work directory.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import urllib.error
import urllib.parse
import urllib.request

import yaml

from zuul.client.commands import CLIError, web_url
from zuul.executor.reproduction import request_from_public, secret_uses, valid_build_uuid

# A project name, connection or canonical host name: relative path
# components that stay where they are put.
_NAME_PART = re.compile(r'[A-Za-z0-9_.@+-]+')
_SCRIPT = 'run.sh'
_EXIT = {'SUCCESS': 0, 'FAILURE': 1, 'POST_FAILURE': 2, 'PRE_FAILURE': 3}


def _check_name(value, what: str, slashes: bool = True) -> str:
    parts = value.split('/') if isinstance(value, str) and slashes else [value]
    if not isinstance(value, str) or not value or any(
            not isinstance(p, str) or not _NAME_PART.fullmatch(p) or p in ('.', '..')
            for p in parts):
        raise CLIError(f'refusing the build: {what} {value!r} would leave the work directory')
    return value


def check_paths(data: dict) -> None:
    """Every name the stored data uses to make a path: CLIError unless
    it stays inside the work directory."""
    request = data.get('request') or {}
    for conn, host in ((request.get('zuul') or {}).get('canonical_hostnames') or {}).items():
        _check_name(conn, 'connection', slashes=False)
        _check_name(host, 'canonical hostname', slashes=False)
    for item in request.get('items') or ():
        _check_name(item.get('connection'), 'connection', slashes=False)
        _check_name(item.get('project'), 'project')
        _check_name(item.get('canonical_hostname'), 'canonical hostname', slashes=False)
    job = request.get('job') or {}
    for rp in job.get('required_projects') or ():
        _check_name(rp.get('project'), 'project')
    for phase in ('pre_run', 'run', 'post_run', 'cleanup_run'):
        for pb in job.get(phase) or ():
            _check_name(pb.get('project'), 'project')
            path = pb.get('path')
            if not isinstance(path, str) or path.startswith('/') or \
                    '..' in path.split('/') or '\x00' in path:
                raise CLIError(f'refusing the build: playbook path {path!r} would leave its '
                               'project')
            for role in pb.get('roles') or ():
                _check_name(role.get('project'), 'project')
                if role.get('target_name') is not None:
                    _check_name(role['target_name'], 'role name', slashes=False)
    for conn, projects in (request.get('repo_state') or {}).items():
        _check_name(conn, 'connection', slashes=False)
        for project in projects:
            _check_name(project, 'project')
    for node in request.get('nodes') or ():
        for name in node.get('name') or ():
            _check_name(name, 'node name', slashes=False)
    for conn, projects in (data.get('git_urls') or {}).items():
        for project, url in (projects or {}).items():
            check_git_url(url, f'{conn}/{project}')


# Where a repository may be fetched from: no ``ext::`` (runs a command),
# no option-like or otherwise odd URL from stored data.
_GIT_URL = re.compile(r'(https?|ssh|git|file)://[^\s]+|/[^\s]*')


def check_git_url(url, what: str) -> str:
    if not isinstance(url, str) or not _GIT_URL.fullmatch(url):
        raise CLIError(f'refusing the git URL {url!r} of {what}: expected http(s)://, '
                       'ssh://, git://, file:// or an absolute path')
    return url


# -- fetching ----------------------------------------------------------------------


def fetch(args, config) -> dict:
    if not valid_build_uuid(args.uuid):
        raise CLIError(f'{args.uuid!r} is not a build uuid')
    base = web_url(args, config)
    url = (f'{base}/api/tenant/{urllib.parse.quote(args.tenant, safe="")}/build/'
           f'{args.uuid}/reproduction')
    headers = {'Authorization': f'Bearer {args.auth_token}'} if args.auth_token else {}
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
            return json.loads(response.read())
    except urllib.error.HTTPError as e:
        try:
            message = json.loads(e.read()).get('error', e.reason)
        except ValueError:
            message = e.reason
        raise CLIError(f'zuul-web refused build {args.uuid} of tenant {args.tenant} '
                       f'({e.code}): {message}') from None
    except OSError as e:
        raise CLIError(f'cannot reach zuul-web at {base}: {e}') from None


def read_secrets(pairs) -> dict:
    """``--secret NAME=FILE``: the file's YAML is the secret's value."""
    secrets = {}
    for pair in pairs or ():
        name, sep, path = pair.partition('=')
        if not sep or not name or not path:
            raise CLIError(f'--secret {pair!r}: expected NAME=FILE')
        try:
            with open(path, encoding='utf-8') as f:
                secrets[name] = yaml.safe_load(f)
        except (OSError, yaml.YAMLError) as e:
            raise CLIError(f'--secret {name}: cannot read {path}: {e}') from None
    return secrets


def plan_secrets(data: dict, secrets: dict, skip_trusted: bool, say) -> set:
    """Say what each secret becomes; the (phase, index) of the playbooks
    left out (trusted ones lacking a secret, with ``skip_trusted``)."""
    skipped = set()
    used = set()
    for phase, index, pb in secret_uses(data):
        label = f'{phase} playbook {pb["project"]}/{pb["path"]}'
        missing = [n for n in pb['secret_names'] if n not in secrets]
        used.update(n for n in pb['secret_names'] if n in secrets)
        if missing and skip_trusted and pb.get('trusted'):
            skipped.add((phase, index))
            say(f'Skipped trusted {label}: it needs secret(s) {", ".join(missing)} '
                '(not handed out; give --secret NAME=FILE to run it)')
            continue
        for name in missing:
            say(f'Secret {name} of {label} is left out: secrets are never handed out '
                f'(give --secret {name}=FILE to supply your own value)')
    unknown = set(secrets) - used - {n for _, _, pb in secret_uses(data)
                                     for n in pb['secret_names']}
    if unknown:
        raise CLIError(f'--secret {", ".join(sorted(unknown))}: the build uses no such secret')
    return skipped


# -- work directory ----------------------------------------------------------------


def make_workdir(path: str) -> str:
    path = os.path.abspath(path)
    if os.path.lexists(path) and (not os.path.isdir(path) or os.path.islink(path)
                                  or os.listdir(path)):
        raise CLIError(f'{path} exists and is not an empty directory')
    os.makedirs(path, exist_ok=True)
    return path


def _nodes_for(request, host: dict | None) -> None:
    """Point every node of ``request`` at ``host`` (address, port,
    username, host keys); None: leave them as recorded."""
    if host is None:
        return
    for node in request.nodes:
        node.interface_ip = node.public_ipv4 = host['address']
        node.private_ipv4 = node.public_ipv6 = None
        node.connection_port = host['port']
        node.username = host['username']
        node.host_keys = list(host['host_keys'])
        node.connection_type = 'ssh'


def parse_host(value: str) -> dict:
    user, sep, rest = value.rpartition('@')
    address, _, port = rest.partition(':') if rest.count(':') == 1 else (rest, '', '')
    if not address or (sep and not user):
        raise CLIError(f'--host {value!r}: expected [USER@]ADDRESS[:PORT]')
    return {'address': address, 'port': int(port or 22), 'username': user or None}


def prepare(data: dict, workdir: str, secrets: dict, skipped: set, host: dict | None,
            git_urls: dict, key_file: str | None, say, sandboxed: bool = True) -> dict:
    """Lay out ``workdir``; the plan run.sh follows (also in plan.json)."""
    from zuul.client.reproduce_build import ReproductionBuild
    request = request_from_public(data, secrets)
    _nodes_for(request, host)
    executor = data.get('executor') or {}
    build = ReproductionBuild(request, workdir, git_urls or {}, key_file, sandboxed,
                              executor.get('git_user'))
    if build.sandbox is None:
        say('The playbooks run without a sandbox (' + ('--no-sandbox' if not sandboxed else
            'bubblewrap is not installed') + '): untrusted playbooks from the changes '
            'under test run with your privileges')
    build.check_state(say)
    plan = build.prepare(skipped)
    say(compare_state(plan['state'], executor.get('merged_state')))
    with open(os.path.join(workdir, _SCRIPT), 'w') as f:
        f.write(render_script(plan, data))
    os.chmod(os.path.join(workdir, _SCRIPT), 0o755)
    with open(os.path.join(workdir, 'plan.json'), 'w') as f:
        json.dump({k: v for k, v in plan.items() if k != 'env'}, f, indent=2)
    return plan


def _comment(text) -> str:
    """``text`` fit for one comment line of run.sh (no line break or
    other control character from stored data ends the comment)."""
    return re.sub(r'[\x00-\x1f\x7f]', '?', str(text))


def compare_state(mine: dict, theirs: dict | None) -> str:
    """One line: whether the branch heads made here are the executor's."""
    if not theirs:
        return ('The executor did not report the commits it ran on (a build not '
                'finished, or from an older executor): not compared')
    heads = {(c, p, r): sha for c, ps in theirs.items() for p, rs in ps.items()
             for r, sha in rs.items()}
    differ = [f'{c}/{p} {r}' for (c, p, r), sha in sorted(heads.items())
              if ((mine.get(c) or {}).get(p) or {}).get(r) != sha]
    if differ:
        return (f'Warning: not the commits the executor ran on: {", ".join(differ)} '
                '(the same trees, unless a change was updated since)')
    return f'Same commits as the executor ran on ({len(heads)} branch heads)'


def render_script(plan: dict, data: dict) -> str:
    """run.sh: the playbooks in the executor's order and with its rules
    (a failing pre-run stops before run; post-run and cleanup always
    run); exit 0 SUCCESS, 1 FAILURE, 2 POST_FAILURE, 3 pre-run failure."""
    build = data.get('build') or {}
    lines = ['#!/bin/bash',
             _comment(f'# Reproduction of build {plan["uuid"]} ({plan["job"]}), made by zuul '
                      'reproduce.'),
             _comment(f'# The original build: {build.get("result") or "not recorded"}.'),
             'result=SUCCESS', 'pre_ok=1',
             f'output={shlex.quote(plan["job_output"])}',
             '# Each playbook\'s console (work/logs/job-output.txt), as it ran.',
             'play() {', '    echo "== $1"', '    shift',
             '    local before; before=$(stat -c %s "$output" 2>/dev/null || echo 0)',
             '    "$@"', '    local status=$?',
             '    [ -f "$output" ] && tail -c +$((before + 1)) "$output"',
             '    return $status', '}']
    calls = []
    for entry in plan['playbooks']:
        if entry.get('skipped'):
            calls.append(_comment(f'# skipped ({entry["skipped"]}): {entry["label"]}'))
            continue
        name = f'{entry["phase"]}_{entry["index"]}'
        lines += ['', _comment(f'# {entry["phase"].upper()}: {entry["label"]}'), f'{name}() (',
                  f'    cd {shlex.quote(entry["cwd"])} || exit 1', '    exec env -i \\']
        lines += [f'        {k}={shlex.quote(v)} \\' for k, v in sorted(entry['env'].items())]
        lines.append('        ' + ' '.join(shlex.quote(c) for c in entry['command']))
        lines.append(')')
        label = shlex.quote(f'{entry["phase"].upper()}: {entry["label"]}')
        phase = entry['phase']
        if phase == 'pre_run':
            calls.append(f'if [ $pre_ok = 1 ]; then play {label} {name} || '
                         '{ pre_ok=0; result=PRE_FAILURE; }; fi')
        elif phase == 'run':
            calls.append(f'if [ $pre_ok = 1 ] && [ $result = SUCCESS ]; then play {label} '
                         f'{name} || result=FAILURE; fi')
        elif phase == 'post_run':
            calls.append(f'play {label} {name} || {{ [ $result = SUCCESS ] && '
                         'result=POST_FAILURE; }')
        else:
            calls.append(f'play {label} {name} || true')
    lines += ['', '# The playbooks, in the order the executor ran them.'] + calls
    lines += ['echo "== Reproduction result: $result"',
              'case $result in SUCCESS) exit 0;; FAILURE) exit 1;; POST_FAILURE) exit 2;; '
              '*) exit 3;; esac', '']
    return '\n'.join(lines)


# -- the command -------------------------------------------------------------------


def _git_url_overrides(pairs) -> dict:
    out = {}
    for pair in pairs or ():
        conn, sep, base = pair.partition('=')
        if not sep or not conn or not base:
            raise CLIError(f'--git-url {pair!r}: expected CONNECTION=BASE_URL')
        out[conn] = check_git_url(base.rstrip('/'), f'--git-url {conn}')
    return out


def _local_node(workdir: str, uuid: str, say):
    from nodepool.driver.netns import host as netns
    why = netns.available()
    if why:
        raise CLIError(f'cannot start a local node ({why}): give --host USER@ADDRESS '
                       'or --prepare-only')
    key = os.path.join(workdir, 'ssh', 'id_ed25519')
    os.makedirs(os.path.dirname(key), mode=0o700)
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-C', 'zuul-reproduce',
                    '-f', key], check=True)
    with open(key + '.pub') as f:
        public = f.read().strip()
    manager = netns.NetnsHostManager()
    node = manager.create(f'repro-{uuid[:8]}', [public])
    say(f'Started local node {node.name} at {node.address} (network namespace)')
    return manager, node, key


def cmd_reproduce(args, config, out) -> int:
    def say(text):
        print(text, file=out, flush=True)
    data = fetch(args, config)
    check_paths(data)
    secrets = read_secrets(args.secret)
    skipped = plan_secrets(data, secrets, args.skip_trusted, say)
    urls = data.get('git_urls') or {}
    for conn, base in _git_url_overrides(args.git_url).items():
        urls[conn] = {p: f'{base}/{p}' for p in _projects_of(data, conn)}
    workdir = make_workdir(args.workdir or f'reproduce-{args.uuid}')
    has_nodes = bool(data['request'].get('nodes'))
    host, local = None, None
    key_file = args.key
    if args.host:
        host = parse_host(args.host)
        host['host_keys'] = _scan(host)
    elif has_nodes and not args.prepare_only:
        manager, node, key_file = _local_node(workdir, args.uuid, say)
        local = (manager, node)
        host = {'address': node.address, 'port': node.port, 'username': node.username,
                'host_keys': node.host_keys}
    elif has_nodes:
        say('--prepare-only: the inventory names the build\'s original nodes; run again '
            'with --host to point it at yours')
    try:
        plan = prepare(data, workdir, secrets, skipped, host, urls, key_file, say,
                       not args.no_sandbox)
        for conn, projects in sorted(plan['state'].items()):
            for project, refs in sorted(projects.items()):
                for ref, sha in sorted(refs.items()):
                    say(f'{conn}/{project} {ref} {sha}')
        say(f'Work directory ready: {workdir}')
        if args.prepare_only:
            say(f'Run it with: {os.path.join(workdir, _SCRIPT)}')
            return 0
        proc = subprocess.run([os.path.join(workdir, _SCRIPT)], stdout=out_fd(out),
                              stderr=subprocess.STDOUT)
        return proc.returncode
    finally:
        if local is not None:
            local[0].delete(local[1])
            say(f'Stopped local node {local[1].name}')


def out_fd(out):
    try:
        out.flush()
        return out.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _projects_of(data: dict, connection: str) -> list[str]:
    from zuul.executor.protocol import ExecuteRequest
    from zuul.executor.reproduction import project_keys
    request = ExecuteRequest.from_dict(data['request'])
    return [p for c, p in project_keys(request) if c == connection]


def _scan(host: dict) -> list[str]:
    from nodepool.driver.netns.host import scan_host_keys
    try:
        return scan_host_keys(host['address'], host['port'])
    except Exception as e:
        raise CLIError(f'cannot read the host keys of {host["address"]}: {e}') from None


def add_parser(subs) -> None:
    sub = subs.add_parser('reproduce', help='run a build again on your own machine')
    sub.add_argument('uuid', help='the build uuid (the build page shows it)')
    sub.add_argument('--tenant', required=True)
    sub.add_argument('--workdir', help='where to lay it out (default ./reproduce-UUID; '
                                       'must not exist or be empty)')
    sub.add_argument('--host', help='run against this node: [USER@]ADDRESS[:PORT] '
                                    '(default: a local network-namespace node)')
    sub.add_argument('--prepare-only', action='store_true',
                     help='lay out the work directory, run nothing')
    sub.add_argument('--key', help='SSH private key for --host (default: your ssh-agent)')
    sub.add_argument('--secret', action='append', metavar='NAME=FILE',
                     help='the value (YAML) of secret NAME (repeatable)')
    sub.add_argument('--skip-trusted', action='store_true',
                     help='leave out trusted playbooks needing a secret not supplied')
    sub.add_argument('--git-url', action='append', metavar='CONNECTION=BASE_URL',
                     help='fetch the projects of CONNECTION from BASE_URL/<project>')
    sub.add_argument('--auth-token', help='bearer token for a tenant with access rules')
    sub.add_argument('--no-sandbox', action='store_true',
                     help='run the playbooks without bubblewrap (as your own user)')

