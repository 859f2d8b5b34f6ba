"""/logs/<uuid>/...?format=listing|json: the JSON the build page reads
(directory listings, and YAML such as zuul-info/inventory.yaml parsed
with secret-looking values redacted)."""

import json

from tests.unit.test_web_logs import UUID, fetch, log_root, web  # noqa: F401 - fixtures
from zuul.web.logs import REDACTED, redact

INVENTORY = """all:
  hosts:
    node: {ansible_host: 192.0.2.1, ansible_password: pw1}
  vars:
    colour: blue
    API_TOKEN: t0ken
    registry_credentials: {user: me, secret_value: s3}
    tls_key: |
      -----BEGIN RSA PRIVATE KEY-----
      MIIE
      -----END RSA PRIVATE KEY-----
    passwords: []
"""


def test_directory_listing_as_json(web, log_root):  # noqa: F811
    status, headers, body = fetch(web, f'/logs/{UUID}/?format=listing')
    assert (status, headers['Content-Type']) == (200, 'application/json')
    entries = json.loads(body)
    # directories first; the symlinks (leak.txt, leakdir) and the FIFO never appear
    assert [(e['name'], e['type']) for e in entries] == [
        ('node', 'dir'), ('job-output.json', 'file'), ('job-output.txt', 'file'),
        ('report.html', 'file')]
    assert entries[2]['size'] == len('hello ✓\n'.encode())
    status, _, body = fetch(web, f'/logs/{UUID}/node/sub%20dir/?format=listing')
    assert [e['name'] for e in json.loads(body)] == ['<b>&.log']


def test_yaml_as_json_with_secrets_redacted(web, log_root):  # noqa: F811
    (log_root / UUID / 'zuul-info').mkdir()
    (log_root / UUID / 'zuul-info' / 'inventory.yaml').write_text(INVENTORY)
    status, headers, body = fetch(web, f'/logs/{UUID}/zuul-info/inventory.yaml?format=json')
    assert (status, headers['Content-Type']) == (200, 'application/json')
    inventory = json.loads(body)
    assert inventory['all']['hosts']['node'] == {'ansible_host': '192.0.2.1',
                                                 'ansible_password': REDACTED}
    assert inventory['all']['vars'] == {
        'colour': 'blue', 'API_TOKEN': REDACTED,
        'registry_credentials': {'user': 'me', 'secret_value': REDACTED},
        'tls_key': REDACTED, 'passwords': []}
    assert b'pw1' not in body and b't0ken' not in body and b'MIIE' not in body


def test_format_errors(web, log_root):  # noqa: F811
    (log_root / UUID / 'bad.yaml').write_text('a: [unclosed\n')
    (log_root / UUID / 'leak.yaml').symlink_to(log_root.parent / 'secret')
    for path, status in [(f'{UUID}/job-output.txt?format=json', 400),
                         (f'{UUID}/?format=json', 400),
                         (f'{UUID}/job-output.txt?format=listing', 404),
                         (f'{UUID}/missing.yaml?format=json', 404),
                         (f'{UUID}/leak.txt?format=json', 400),
                         (f'{UUID}/leak.yaml?format=json', 404),
                         (f'{UUID}/bad.yaml?format=json', 422),
                         (f'{UUID}/?format=xml', 400),
                         (f'{UUID}/?colour=red', 400),
                         (f'{UUID}/leakdir/?format=listing', 404)]:
        assert fetch(web, f'/logs/{path}')[0] == status, path


def test_redact_keeps_structure():
    assert redact({'a': [{'token': 1}, 'x'], 'password': None, 'n': 2.5}) == {
        'a': [{'token': REDACTED}, 'x'], 'password': None, 'n': 2.5}
