"""Seed 001's node and image objects as Zuul configuration: the five
stanzas, their singleton and trust rules, references converted to
canonical names, and resolution in the seed's override order."""

from __future__ import annotations

import textwrap

import pytest

from tests.harness import docs
from zuul.configloader.launcher_objects import resolve_providers
from zuul.configloader.layout import ConfigFile, LayoutLoader
from zuul.driver.registry import default_registry
from zuul.model.launcher import ResolvedProvider
from zuul.model.tenant import Tenant, TenantProject

HOST = 'review.example.org'
CONFIG = TenantProject('gerrit', 'opendev/images', trusted=True)
APP = TenantProject('gerrit', 'org/app', trusted=False)
OTHER = TenantProject('gerrit', 'org/other', trusted=False)
STATIC = TenantProject('gerrit', 'infra/static', trusted=True)


def cname(project, name):
    return f'{HOST}/{project.name}/{name}'


def _f(project, text, path='zuul.yaml', branch='master') -> ConfigFile:
    return ConfigFile(path=path, text=textwrap.dedent(text), project=project, branch=branch)


def load(*files, projects=(CONFIG, APP, OTHER), connections=None, **tenant_kw):
    conns = {'gerrit': 'gerrit', 'rackspace': 'openstack', 'static': 'static'}
    conns.update(connections or {})
    loader = LayoutLoader(default_registry(), connections=conns,
                          canonical_hostnames={'gerrit': HOST})
    tenant = Tenant(name='t1', projects=list(projects), **tenant_kw)
    return loader.load(tenant, list(files))


def errors(layout, severity='error'):
    return [e for e in layout.errors if e.severity == severity]


def reasons(layout):
    return [e.reason for e in errors(layout)]


def provider(layout, name, project=CONFIG) -> ResolvedProvider:
    return layout.resolved_providers[cname(project, name)]


def label(layout, provider_name, label_name, project=CONFIG, label_project=CONFIG):
    return provider(layout, provider_name, project).labels[cname(label_project, label_name)]


# The seed's example, as printed (it uses a ``small`` flavor it never
# defines; SMALL adds it).
SEED_CENTRAL = """
# Images, flavors, and labels are the building blocks of the
# configuration.

- image:
    name: centos-7
    type: zuul

- image:
    name: ubuntu
    type: cloud

- flavor:
    name: large

- label:
    name: centos-7
    min-ready: 1
    flavor: large
    image: centos-7

- label:
    name: ubuntu
    flavor: small
    image: ubuntu

# A section for each cloud+region+az

- section:
    name: rax-base
    abstract: true
    connection: rackspace
    boot-timeout: 120
    launch-timeout: 600
    key-name: infra-root-keys-2020-05-13
    quota:
      instances: 2000
    subnet: some-subnet
    tags:
      section-info: foo
    images:
      - name: centos-7
        config-drive: true
      - name: ubuntu
        image-name: ibm-ubuntu-20-04-3-minimal-amd64-1
    flavors:
      - name: small
        cloud-flavor: "Performance 8G"
      - name: large
        cloud-flavor: "Performance 16G"

- section:
    name: rax-dfw
    parent: rax-base
    region: 'DFW'
    availability-zones: ["a", "b"]

- provider:
    name: rax-dfw-main
    section: rax-dfw
    labels:
      - name: centos-7
      - name: ubuntu
        key-name: infra-root-keys-2020-05-13
        tags:
          provider-info: bar
"""
SMALL = """
- flavor:
    name: small
"""
SEED_SINGLE = """
- image:
    name: devstack
    type: zuul

- label:
    name: devstack

- provider:
    name: rax-dfw-devstack
    section: rax-dfw
    image:
      - name: devstack
        config-drive: true
    labels:
      - name: devstack
"""
SEED_STATIC = """
- label:
    name: big-static-node

- section:
    name: static-nodes
    connection: null
    nodes:
      - name: static.example.com
        labels:
          - big-static-node
        host-key: ...
        username: zuul

- provider:
    name: static-provider
    section: static-nodes
    labels:
      - big-static-node
"""


# -- the seed's example ------------------------------------------------------------


def test_the_seed_example_as_printed_names_its_one_mistake():
    layout = load(_f(CONFIG, SEED_CENTRAL))
    bad = errors(layout)
    assert [(e.object_type, e.object_name, e.reason) for e in bad] == [
        ('label', 'ubuntu', 'unknown flavor "small"'),
        ('section', 'rax-base', 'flavors: unknown flavor "small"')]
    assert bad[0].path == 'zuul.yaml' and bad[0].line == 22
    assert bad[0].project == 'opendev/images'
    # Everything else still resolves.
    assert cname(CONFIG, 'centos-7') in provider(layout, 'rax-dfw-main').labels


def test_the_seed_example_loads_and_resolves():
    layout = load(_f(CONFIG, SEED_CENTRAL + SMALL), _f(APP, SEED_SINGLE),
                  _f(STATIC, SEED_STATIC), projects=(CONFIG, STATIC, APP))
    assert errors(layout) == []
    assert sorted(layout.images) == ['centos-7', 'devstack', 'ubuntu']
    assert sorted(layout.labels) == ['big-static-node', 'centos-7', 'devstack', 'ubuntu']
    main = provider(layout, 'rax-dfw-main')
    assert main.section == cname(CONFIG, 'rax-dfw')
    assert main.connection == 'rackspace'
    assert main.tenants == ['t1']
    assert main.settings['quota'] == {'instances': 2000}
    assert main.settings['region'] == 'DFW'
    assert main.settings['boot-timeout'] == 120
    centos = main.labels[cname(CONFIG, 'centos-7')]
    assert centos.image == cname(CONFIG, 'centos-7')
    assert centos.flavor == cname(CONFIG, 'large')
    assert centos.min_ready == 1
    assert centos.settings['config-drive'] is True
    assert centos.settings['cloud-flavor'] == 'Performance 16G'
    ubuntu = main.labels[cname(CONFIG, 'ubuntu')]
    assert ubuntu.settings['image-name'] == 'ibm-ubuntu-20-04-3-minimal-amd64-1'
    assert ubuntu.settings['cloud-flavor'] == 'Performance 8G'
    assert ubuntu.settings['tags'] == {'section-info': 'foo', 'provider-info': 'bar'}
    assert ubuntu.settings['availability-zones'] == ['a', 'b']
    assert main.images[cname(CONFIG, 'ubuntu')].type == 'cloud'
    devstack = provider(layout, 'rax-dfw-devstack', APP)
    assert devstack.section == cname(CONFIG, 'rax-dfw')
    assert set(devstack.labels) == {cname(APP, 'devstack')}
    static = provider(layout, 'static-provider', STATIC)
    assert static.connection is None
    assert static.settings['nodes'][0]['name'] == 'static.example.com'
    assert set(static.labels) == {cname(STATIC, 'big-static-node')}


def test_resolved_providers_survive_the_wire_format():
    layout = load(_f(CONFIG, SEED_CENTRAL + SMALL))
    main = provider(layout, 'rax-dfw-main')
    assert ResolvedProvider.from_dict(main.to_dict()) == main


def test_resolution_can_be_repeated_on_any_layout():
    layout = load(_f(CONFIG, SEED_CENTRAL + SMALL))
    again = resolve_providers(layout)
    assert again == layout.resolved_providers


# -- the override order -------------------------------------------------------------

LEVELS = ('image', 'flavor', 'label', 'section', 'section-image', 'section-flavor',
          'provider', 'provider-label')


def _ordered_config(levels, key='userdata', value=lambda level: level):
    def at(level, indent):
        return f'\n{" " * indent}{key}: {value(level)}' if level in levels else ''
    return f"""
- image:
    name: img
    type: cloud{at('image', 4)}
- flavor:
    name: flv{at('flavor', 4)}
- label:
    name: lbl
    image: img
    flavor: flv{at('label', 4)}
- section:
    name: sec
    connection: rackspace{at('section', 4)}
    images:
      - name: img{at('section-image', 8)}
    flavors:
      - name: flv{at('section-flavor', 8)}
- provider:
    name: prv
    section: sec{at('provider', 4)}
    labels:
      - name: lbl{at('provider-label', 8)}
"""


@pytest.mark.parametrize('index', range(len(LEVELS)))
def test_each_level_overrides_the_ones_before_it(index):
    """Set the key at this level and every earlier one: this level wins."""
    layout = load(_f(CONFIG, _ordered_config(LEVELS[:index + 1])))
    assert errors(layout) == []
    assert label(layout, 'prv', 'lbl').settings['userdata'] == LEVELS[index]


@pytest.mark.parametrize('index', range(len(LEVELS)))
def test_a_level_alone_reaches_the_label(index):
    layout = load(_f(CONFIG, _ordered_config([LEVELS[index]])))
    assert label(layout, 'prv', 'lbl').settings['userdata'] == LEVELS[index]


@pytest.mark.parametrize('index', range(len(LEVELS) - 1))
def test_a_later_level_is_not_overridden_by_earlier_ones(index):
    """Only this level and the one after: the later one still wins whatever
    order the stanzas appear in."""
    layout = load(_f(CONFIG, _ordered_config(LEVELS[index:index + 2])))
    assert label(layout, 'prv', 'lbl').settings['userdata'] == LEVELS[index + 1]


def test_dicts_merge_across_levels():
    layout = load(_f(CONFIG, _ordered_config(
        ('label', 'section', 'provider', 'provider-label'), key='tags',
        value=lambda level: '{%s: %s, shared: %s}' % (level.replace('-', '_'), 1, level))))
    assert label(layout, 'prv', 'lbl').settings['tags'] == {
        'label': 1, 'section': 1, 'provider': 1, 'provider_label': 1,
        'shared': 'provider-label'}


def test_lists_concatenate_across_levels():
    layout = load(_f(CONFIG, _ordered_config(
        ('label', 'section', 'provider', 'provider-label'), key='networks',
        value=lambda level: f'[{level}]')))
    assert label(layout, 'prv', 'lbl').settings['networks'] == [
        'label', 'section', 'provider', 'provider-label']


SECTIONS = """
- image:
    name: img
    type: cloud
- image:
    name: extra
    type: zuul
- label:
    name: lbl
    image: img
- section:
    name: root
    abstract: true
    connection: rackspace
    boot-timeout: 10
    launch-timeout: 100
    tags: {root: 1}
    networks: [root-net]
    images:
      - name: img
        image-name: root-image
        username: root-user
- section:
    name: middle
    parent: root
    boot-timeout: 20
    tags: {middle: 1}
    networks: [middle-net]
    images:
      - name: img
        image-name: middle-image
- section:
    name: leaf
    parent: middle
    tags: {leaf: 1}
- provider:
    name: prv
    section: leaf
    images:
      - name: extra
        config-drive: true
    labels: [lbl]
"""


def test_section_inheritance_applies_parents_first():
    layout = load(_f(CONFIG, SECTIONS))
    assert errors(layout) == []
    prv = provider(layout, 'prv')
    assert prv.settings['boot-timeout'] == 20
    assert prv.settings['launch-timeout'] == 100
    assert prv.settings['tags'] == {'root': 1, 'middle': 1, 'leaf': 1}
    assert prv.settings['networks'] == ['root-net', 'middle-net']
    lbl = label(layout, 'prv', 'lbl')
    assert lbl.settings['image-name'] == 'middle-image'
    assert lbl.settings['username'] == 'root-user'
    assert lbl.settings['boot-timeout'] == 20


def test_provider_images_augment_section_images():
    layout = load(_f(CONFIG, SECTIONS))
    images = provider(layout, 'prv').images
    assert list(images) == [cname(CONFIG, 'img'), cname(CONFIG, 'extra')]
    assert images[cname(CONFIG, 'img')].settings == {'image-name': 'middle-image',
                                                     'username': 'root-user'}
    assert images[cname(CONFIG, 'extra')].settings == {'config-drive': True}
    assert images[cname(CONFIG, 'extra')].type == 'zuul'


def test_provider_image_entries_override_section_ones():
    layout = load(_f(CONFIG, SECTIONS.replace(
        "      - name: extra\n", "      - name: img\n        image-name: mine\n"
        "      - name: extra\n")))
    assert provider(layout, 'prv').images[cname(CONFIG, 'img')].settings['image-name'] == \
        'mine'
    assert label(layout, 'prv', 'lbl').settings['image-name'] == 'mine'


def test_defaults_dicts_apply_to_their_kind():
    layout = load(_f(CONFIG, """
        - image: {name: img, type: cloud}
        - flavor: {name: flv}
        - label: {name: lbl, image: img, flavor: flv}
        - section:
            name: sec
            connection: rackspace
            image-defaults: {username: def-user}
            flavor-defaults: {volume-size: 10}
            label-defaults: {key-name: def-key}
            images: [{name: img, image-id: abc}]
            flavors: [{name: flv, flavor-name: m1.small}]
        - provider:
            name: prv
            section: sec
            labels: [lbl]
        """))
    assert errors(layout) == []
    settings = label(layout, 'prv', 'lbl').settings
    assert settings['username'] == 'def-user'
    assert settings['volume-size'] == 10
    assert settings['key-name'] == 'def-key'
    assert settings['image-id'] == 'abc'
    assert settings['flavor-name'] == 'm1.small'
    assert provider(layout, 'prv').images[cname(CONFIG, 'img')].settings == {
        'username': 'def-user', 'image-id': 'abc'}


def test_provider_level_settings_stay_out_of_label_settings():
    layout = load(_f(CONFIG, SEED_CENTRAL + SMALL))
    settings = label(layout, 'rax-dfw-main', 'centos-7').settings
    assert 'quota' not in settings
    assert 'nodes' not in settings


# -- canonical names ------------------------------------------------------------------


def test_references_become_canonical_names_of_the_defining_project():
    layout = load(_f(CONFIG, SEED_CENTRAL + SMALL), _f(APP, """
        - label:
            name: app-centos
            image: centos-7
            flavor: large
        - provider:
            name: app-provider
            section: rax-dfw
            labels: [app-centos]
        """))
    assert errors(layout) == []
    lbl = label(layout, 'app-provider', 'app-centos', APP, APP)
    assert lbl.canonical_name == f'{HOST}/org/app/app-centos'
    assert lbl.image == f'{HOST}/opendev/images/centos-7'
    assert lbl.flavor == f'{HOST}/opendev/images/large'
    assert layout.labels['app-centos'].canonical_name == lbl.canonical_name


# -- static nodes ----------------------------------------------------------------------


def test_include_all_node_labels_adds_the_labels_of_the_sections_nodes():
    layout = load(_f(CONFIG, """
        - label: {name: small-static}
        - label: {name: big-static}
        - section:
            name: static-nodes
            connection: null
            nodes:
              - name: a.example.com
                labels: [small-static, big-static]
              - name: b.example.com
                labels: big-static
                connection-port: 2222
        - provider:
            name: static-provider
            section: static-nodes
            include-all-node-labels: true
        """))
    assert errors(layout) == []
    prv = provider(layout, 'static-provider')
    assert set(prv.labels) == {cname(CONFIG, 'small-static'), cname(CONFIG, 'big-static')}
    assert [n['name'] for n in prv.settings['nodes']] == ['a.example.com', 'b.example.com']


def test_include_all_node_labels_needs_defined_labels():
    layout = load(_f(CONFIG, """
        - section:
            name: static-nodes
            connection: null
            nodes:
              - {name: a.example.com, labels: [nowhere]}
        - provider:
            name: static-provider
            section: static-nodes
            include-all-node-labels: true
        """))
    [error] = errors(layout)
    assert error.object_type == 'provider'
    assert 'label "nowhere", which is not defined' in error.reason


def test_a_static_connection_may_hold_nodes_but_a_cloud_may_not():
    text = """
        - label: {name: s}
        - section:
            name: sec
            connection: %s
            nodes: [{name: a.example.com, labels: s}]
        - provider: {name: prv, section: sec, labels: [s]}
        """
    assert errors(load(_f(CONFIG, text % 'static'))) == []
    [error] = errors(load(_f(CONFIG, text % 'rackspace')))
    assert 'connection: null' in error.reason


def test_a_section_chain_without_a_connection_is_an_error():
    layout = load(_f(CONFIG, """
        - section: {name: sec}
        - provider: {name: prv, section: sec}
        """))
    [error] = errors(layout)
    assert error.object_type == 'provider' and 'no connection' in error.reason
    assert layout.resolved_providers == {}


def test_an_unknown_connection_is_a_warning():
    layout = load(_f(CONFIG, """
        - section: {name: sec, connection: nowhere}
        - provider: {name: prv, section: sec}
        """))
    assert errors(layout) == []
    [warning] = errors(layout, 'warning')
    assert 'unknown connection "nowhere"' in warning.reason


# -- errors ------------------------------------------------------------------------------


def test_unknown_image_and_flavor_in_a_label():
    layout = load(_f(CONFIG, """
        - label:
            name: lbl
            image: nope
        - label:
            name: lbl2
            flavor: nada
        """))
    assert [(e.object_name, e.reason, e.line) for e in errors(layout)] == [
        ('lbl', 'unknown image "nope"', 2), ('lbl2', 'unknown flavor "nada"', 5)]


def test_a_broken_label_is_left_out_of_providers():
    layout = load(_f(CONFIG, SEED_CENTRAL))
    assert cname(CONFIG, 'ubuntu') not in provider(layout, 'rax-dfw-main').labels


def test_unknown_section_and_unknown_label_in_a_provider():
    layout = load(_f(CONFIG, """
        - section: {name: sec, connection: rackspace}
        - provider: {name: p1, section: nope}
        - provider: {name: p2, section: sec, labels: [ghost]}
        """))
    assert [(e.object_type, e.object_name, e.reason) for e in errors(layout)] == [
        ('provider', 'p1', 'unknown section "nope"'),
        ('provider', 'p2', 'labels: unknown label "ghost"')]
    assert list(layout.resolved_providers) == [cname(CONFIG, 'p2')]


def test_unknown_parent_section():
    layout = load(_f(CONFIG, """
        - section: {name: sec, parent: nope, connection: rackspace}
        """))
    [error] = errors(layout)
    assert (error.object_type, error.object_name) == ('section', 'sec')
    assert error.reason == 'unknown parent section "nope"'


def test_a_section_cycle_is_named_once():
    layout = load(_f(CONFIG, """
        - section: {name: a, parent: b, connection: rackspace}
        - section: {name: b, parent: c}
        - section: {name: c, parent: a}
        - provider: {name: prv, section: a}
        """))
    cycle = [e for e in errors(layout) if 'cycle' in e.reason]
    assert [e.reason for e in cycle] == ['section inheritance cycle: a -> b -> c -> a']
    assert any(e.object_type == 'provider' for e in errors(layout))
    assert layout.resolved_providers == {}


def test_a_section_may_not_be_its_own_parent():
    layout = load(_f(CONFIG, '- section: {name: a, parent: a, connection: x}\n'))
    assert reasons(layout) == ['section inheritance cycle: a -> a']


def test_a_provider_may_not_use_an_abstract_section():
    layout = load(_f(CONFIG, """
        - section: {name: base, abstract: true, connection: rackspace}
        - provider: {name: prv, section: base}
        """))
    [error] = errors(layout)
    assert error.object_type == 'provider' and 'abstract' in error.reason


def test_a_provider_label_needs_its_image_and_flavor_attached():
    layout = load(_f(CONFIG, """
        - image: {name: img, type: cloud}
        - label: {name: lbl, image: img}
        - section: {name: sec, connection: rackspace}
        - provider: {name: prv, section: sec, labels: [lbl]}
        """))
    [error] = errors(layout)
    assert 'uses the image "img"' in error.reason
    assert provider(layout, 'prv').labels == {}


@pytest.mark.parametrize('kind,text', [
    ('image', '- image: {name: x, type: cloud}'),
    ('flavor', '- flavor: {name: x}'),
    ('label', '- label: {name: x}'),
    ('section', '- section: {name: x, connection: null}'),
    ('provider', '- provider: {name: x, section: s}'),
])
def test_a_name_is_defined_once_per_tenant(kind, text):
    other = APP if kind != 'section' else TenantProject('gerrit', 'org/config2', True)
    layout = load(_f(CONFIG, text), _f(other, text),
                  projects=(CONFIG, other))
    dup = [e for e in errors(layout) if 'already defined' in e.reason]
    assert len(dup) == 1
    assert dup[0].object_type == kind and dup[0].project == other.name
    assert f'{kind} "x" is already defined at opendev/images:master:zuul.yaml:1' \
        in dup[0].reason


def test_an_identical_definition_on_another_branch_is_accepted():
    text = '- image: {name: x, type: cloud, username: zuul}\n'
    layout = load(_f(APP, text), _f(APP, text, branch='stable'))
    assert errors(layout) == []
    changed = load(_f(APP, text), _f(APP, text.replace('zuul}', 'root}'), branch='stable'))
    assert ['already defined' in r for r in reasons(changed)] == [True]


def test_sections_only_in_config_projects():
    layout = load(_f(APP, '- section: {name: x, connection: null}\n'))
    [error] = errors(layout)
    assert error.object_type == 'section' and 'config projects' in error.reason
    assert layout.sections == {}


def test_untrusted_projects_may_define_images_flavors_labels_and_providers():
    layout = load(_f(CONFIG, '- section: {name: sec, connection: rackspace}\n'),
                  _f(APP, """
        - image: {name: img, type: zuul}
        - flavor: {name: flv}
        - label: {name: lbl, image: img, flavor: flv}
        - provider:
            name: prv
            section: sec
            images: [img]
            flavors: [flv]
            labels: [lbl]
        """))
    assert errors(layout) == []
    assert cname(APP, 'lbl') in provider(layout, 'prv', APP).labels


def test_main_yaml_exclude_keeps_a_project_from_defining_labels():
    restricted = TenantProject('gerrit', 'org/app', trusted=False,
                               load_classes=frozenset({'job', 'project'}))
    layout = load(_f(restricted, '- label: {name: lbl}\n'),
                  projects=(CONFIG, restricted))
    assert layout.labels == {}


@pytest.mark.parametrize('text,reason', [
    ('- image: {name: x}', 'missing required attribute "type"'),
    ('- image: {name: x, type: docker}', 'type'),
    ('- flavor: {name: x, colour: blue}', 'unknown attribute "colour"'),
    ('- label: {name: x, min-ready: -1}', 'min-ready'),
    ('- section: {name: x, quota: {disks: 3}}', 'unknown attribute "quota.disks"'),
    ('- section: {name: x, nodes: [{labels: a}]}', 'missing required attribute'),
    ('- provider: {name: x}', 'missing required attribute "section"'),
    ('- provider: {name: x, section: s, image: [a], images: [b]}', 'either'),
    ('- provider: {name: x, section: s, labels: [a, a]}', 'listed twice'),
])
def test_invalid_stanzas_are_errors_with_location(text, reason):
    layout = load(_f(CONFIG, '- job: {name: before}\n' + text + '\n'))
    [error] = errors(layout)
    assert reason in error.reason
    assert error.line == 2 and error.path == 'zuul.yaml'


def test_an_image_entry_may_not_change_the_image_type():
    layout = load(_f(CONFIG, """
        - image: {name: img, type: zuul}
        - section: {name: sec, connection: null, images: [{name: img, type: cloud}]}
        """))
    assert reasons(layout) == ['images: "img" is a zuul image, not cloud']


# -- nodesets and use-nodepool ----------------------------------------------------------

NODESETS = """
- label: {name: defined}
- nodeset:
    name: ns
    nodes:
      - {name: a, label: defined}
      - {name: b, label: undefined-label}
- job:
    name: inline
    parent: null
    nodeset:
      nodes:
        - {name: c, label: also-undefined}
"""


def test_without_nodepool_unknown_nodeset_labels_are_errors():
    layout = load(_f(CONFIG, NODESETS), use_nodepool=False)
    bad = errors(layout)
    assert [(e.object_type, e.object_name) for e in bad] == [('nodeset', 'ns'),
                                                             ('job', 'inline')]
    assert '"undefined-label"' in bad[0].reason and bad[0].line == 3
    assert '"also-undefined"' in bad[1].reason


def test_with_nodepool_unknown_labels_go_to_nodepool():
    assert errors(load(_f(CONFIG, NODESETS))) == []


# -- the documentation's examples ------------------------------------------------------

DOC_PAGE = 'doc/source/reference/launcher-objects.rst'


def doc_yaml_blocks() -> list[str]:
    return docs.code_blocks(DOC_PAGE, 'yaml')


def test_the_documentation_examples_load_and_resolve_as_documented():
    blocks = doc_yaml_blocks()
    assert len(blocks) >= 5
    nodes = TenantProject('gerrit', 'infra/nodes', trusted=True)
    layout = load(_f(nodes, '\n'.join(blocks)), projects=(nodes,),
                  connections={'example-cloud': 'openstack'})
    assert list(layout.errors) == []
    debian = label(layout, 'region-one-main', 'debian-small', nodes, nodes)
    assert debian.canonical_name == f'{HOST}/infra/nodes/debian-small'
    for key, value in {'image-name': 'debian-12-genericcloud-amd64', 'config-drive': True,
                       'flavor-name': 'm1.small', 'boot-timeout': 120,
                       'key-name': 'infra-key', 'region': 'RegionOne',
                       'username': 'debian'}.items():
        assert debian.settings[key] == value, key
    ubuntu = label(layout, 'region-one-main', 'ubuntu-large', nodes, nodes)
    assert ubuntu.settings['tags'] == {'managed-by': 'zuul', 'team': 'infra'}
    lab = provider(layout, 'lab', nodes)
    assert lab.connection is None
    assert set(lab.labels) == {f'{HOST}/infra/nodes/bare-metal'}


def test_without_nodepool_project_pipeline_job_variants_are_checked_too():
    layout = load(_f(CONFIG, """
        - pipeline:
            name: check
            manager: independent
        - job: {name: base, parent: null}
        - project:
            name: org/app
            check:
              jobs:
                - base:
                    nodeset:
                      nodes: [{name: x, label: nowhere}]
        """), use_nodepool=False)
    bad = [e for e in errors(layout) if '"nowhere"' in e.reason]
    assert [e.object_type for e in bad] == ['job']


def test_only_trusted_providers_may_add_static_nodes():
    text = """
        - label: {name: s}
        - provider:
            name: %s
            section: static-nodes
            nodes: [{name: evil.example.com, labels: s}]
            labels: [s]
        """
    section = _f(CONFIG, '- section: {name: static-nodes, connection: null}\n',
                 path='zuul.d/sections.yaml')
    layout = load(section, _f(CONFIG, text % 'trusted'))
    assert errors(layout) == []
    layout = load(section, _f(APP, text % 'untrusted'))
    [error] = errors(layout)
    assert error.object_type == 'provider' and 'config projects' in error.reason
