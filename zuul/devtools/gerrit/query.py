"""``gerrit query --format JSON``: the subset of the query language the
Zuul Gerrit driver uses, answered in Gerrit 3.x's JSON shape."""

from __future__ import annotations

import json
import re
import shlex
import time

from zuul.devtools.gerrit.store import Change, ReviewError, ReviewStore

_AGE_UNITS = {'s': 1, 'sec': 1, 'm': 60, 'min': 60, 'h': 3600, 'hour': 3600,
              'd': 86400, 'day': 86400, 'w': 604800, 'week': 604800}

FLAGS = {'--current-patch-set', '--patch-sets', '--all-approvals', '--files',
         '--comments', '--commit-message', '--dependencies', '--submit-records',
         '--all-reviewers'}


def parse_age(text: str) -> int:
    m = re.fullmatch(r'(\d+)\s*([a-z]+)?', text)
    if not m:
        raise ReviewError(f'bad age "{text}"')
    unit = m.group(2) or 's'
    if unit not in _AGE_UNITS:
        raise ReviewError(f'bad age unit "{unit}"')
    return int(m.group(1)) * _AGE_UNITS[unit]


OPERATORS = {'age', 'change', '', 'commit', 'project', 'branch', 'topic', 'status', 'is'}


def _check_term(term: str) -> None:
    key = term.lstrip('-').partition(':')[0] if ':' in term else ''
    if key not in OPERATORS:
        raise ReviewError(f'unsupported query operator "{key}"')
    if key == 'age':
        parse_age(term.partition(':')[2])


def _term_matches(store: ReviewStore, change: Change, term: str) -> bool:
    negate = term.startswith('-')
    key, _, value = term.lstrip('-').partition(':') if ':' in term else ('', '', term)
    if key == 'age':
        matched = time.time() - change.last_updated >= parse_age(value)
    elif key in ('change', ''):
        matched = value == str(change.number) or value == change.change_id
    elif key == 'commit':
        matched = any(ps.revision.startswith(value) for ps in change.patchsets)
    elif key == 'project':
        matched = change.project == value
    elif key == 'branch':
        matched = change.branch == value
    elif key == 'topic':
        matched = change.topic == value
    elif key == 'status':
        matched = {'open': change.is_open, 'closed': not change.is_open,
                   'merged': change.status == 'MERGED',
                   'abandoned': change.status == 'ABANDONED'}.get(value, False)
    elif key == 'is':
        matched = {'open': change.is_open, 'closed': not change.is_open,
                   'merged': change.status == 'MERGED'}.get(value, False)
    else:
        raise ReviewError(f'unsupported query operator "{key}"')
    return matched != negate


def run_query(store: ReviewStore, argv: list[str]) -> str:
    """Answer a ``gerrit query`` command line (without ``gerrit query``)."""
    flags = {a for a in argv if a.startswith('--')}
    if '--format' in argv:
        i = argv.index('--format')
        fmt = argv[i + 1] if i + 1 < len(argv) else ''
        if fmt.upper() != 'JSON':
            raise ReviewError('only --format JSON is supported')
        argv = argv[:i] + argv[i + 2:]
    elif '--format=JSON' in flags:
        pass
    else:
        raise ReviewError('only --format JSON is supported')
    terms = [a for a in argv if not a.startswith('--')]
    if not terms:
        raise ReviewError('missing query')
    # Gerrit accepts the query as one quoted argument too.
    terms = [t for a in terms for t in shlex.split(a)]
    limit = None
    filters = []
    for t in terms:
        if t.startswith('limit:'):
            limit = int(t.split(':', 1)[1])
        elif t.upper() != 'AND':
            filters.append(t)
    for t in filters:
        _check_term(t)
    start = time.monotonic()
    with store.lock:
        candidates = store.changes.values()
        for t in filters:
            key, _, value = t.partition(':') if ':' in t else ('', '', t)
            if key in ('change', '') and value.isdigit():
                # One change by number (what Zuul asks most): no scan.
                found = store.changes.get(int(value))
                candidates = [found] if found is not None else []
                break
        changes = sorted(candidates, key=lambda c: -c.last_updated)
        rows = [c for c in changes if all(_term_matches(store, c, t) for t in filters)]
        if limit is not None:
            rows = rows[:limit]
        lines = [json.dumps(change_to_query_dict(store, c, flags)) for c in rows]
    stats = {'type': 'stats', 'rowCount': len(lines), 'moreChanges': False,
             'runTimeMilliseconds': int((time.monotonic() - start) * 1000)}
    return '\n'.join(lines + [json.dumps(stats)]) + '\n'


def change_to_query_dict(store: ReviewStore, change: Change, flags: set[str]) -> dict:
    d = store.change_dict(change)
    d.update({'lastUpdated': change.last_updated, 'open': change.is_open,
              'hashtags': list(change.hashtags)})
    with_files = '--files' in flags
    if '--current-patch-set' in flags:
        d['currentPatchSet'] = change.current.to_dict(with_files)
    if '--patch-sets' in flags or '--all-approvals' in flags:
        d['patchSets'] = [ps.to_dict(with_files) for ps in change.patchsets]
    if '--dependencies' in flags:
        depends, needed = _dependencies(store, change)
        if depends:
            d['dependsOn'] = depends
        if needed:
            d['neededBy'] = needed
    if '--submit-records' in flags:
        d['submitRecords'] = [_submit_record(change)]
    if '--comments' in flags:
        d['comments'] = [
            {'timestamp': r.get('time', change.last_updated),
             'reviewer': store.account(r['user']).to_dict(), 'message': r['message']}
            for r in store.review_log if r['change'] == change.number and r['message']]
    return d


def _ref_dict(change: Change, revision: str) -> dict:
    ps = next(p for p in change.patchsets if p.revision == revision)
    return {'id': change.change_id, 'number': change.number, 'ref': ps.ref,
            'revision': ps.revision, 'isCurrentPatchSet': ps is change.current}


def _dependencies(store: ReviewStore, change: Change):
    """Git-parent dependencies, as Gerrit derives them."""
    depends, needed = [], []
    parents = set(change.current.parents)
    for other in store.changes.values():
        if other is change:
            continue
        for ps in other.patchsets:
            if ps.revision in parents:
                depends.append(_ref_dict(other, ps.revision))
        if change.current.revision in other.current.parents:
            needed.append(_ref_dict(other, other.current.revision))
    return depends, needed


def _submit_record(change: Change) -> dict:
    labels = []
    ok = True
    for label, need in (('Code-Review', 2), ('Verified', 1), ('Workflow', 1)):
        value = change.approval_value(label)
        status = 'OK' if value >= need else ('REJECT' if value < 0 else 'NEED')
        ok = ok and status == 'OK'
        labels.append({'label': label, 'status': status})
    status = 'CLOSED' if not change.is_open else ('OK' if ok else 'NOT_READY')
    return {'status': status, 'labels': labels}
