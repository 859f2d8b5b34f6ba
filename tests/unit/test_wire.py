"""zuul.lib.wire: the JSON of a payload is what json.dumps(asdict())
gave, nested dataclasses (in fields, lists and dicts) included, and the
payload reads back; what JSON cannot hold is refused as before."""

import dataclasses
import json

import pytest

from zuul.executor import protocol as ep
from zuul.lib import wire
from zuul.merger.protocol import MergeRequest, ProjectFiles


def _request() -> ep.ExecuteRequest:
    run = ep.PlaybookSpec('gerrit', 'org/config', 'main', 'playbooks/run.yaml',
                       roles=[ep.RoleSpec('gerrit', 'org/roles', target_name='r')],
                       secrets={'creds': {'password': 'p'}})
    return ep.ExecuteRequest(
        uuid='u1', job=ep.JobSpec(name='j', tags=['z', 'a'], attempts=4, run=[run]),
        zuul=ep.ZuulContext('t', 'check', 'bs', canonical_hostnames={'gerrit': 'r.example.org'}),
        nodes=[ep.NodeSpec(name=['n1'], label='small'), ep.NodeSpec(name=['n2'], label='big')],
        items=[ep.ItemSpec('gerrit', 'org/a', 'r.example.org', branch='main', number=1,
                        patchset='2')])


def test_the_json_is_what_asdict_gave_and_reads_back():
    request = _request()
    assert wire.dumps(request) == json.dumps(dataclasses.asdict(request)).encode('utf8')
    assert request.to_json() == wire.dumps(request)
    assert ep.ExecuteRequest.from_json(request.to_json()) == request
    merge = MergeRequest(items=[], read_files=['zuul.yaml'])
    assert merge.to_json() == json.dumps(dataclasses.asdict(merge)).encode('utf8')
    files = {'in a dict': ProjectFiles('gerrit', 'org/a', 'main', {'a': 'x'})}
    assert json.loads(wire.dumps(files)) == {'in a dict': dataclasses.asdict(files['in a dict'])}


def test_what_json_cannot_hold_is_refused():
    with pytest.raises(TypeError, match='set is not JSON serializable'):
        wire.dumps({'a': {1, 2}})
    with pytest.raises(TypeError, match='type is not JSON serializable'):
        wire.dumps({'a': ep.ExecuteRequest})
