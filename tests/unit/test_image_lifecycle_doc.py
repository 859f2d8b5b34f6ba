"""The examples of doc/source/reference/image-lifecycle.rst load as
printed: the image, provider and pipelines (with the ``zuul`` reporter),
the jobs and project, and the build playbook's artifacts."""

from __future__ import annotations

import os

import yaml

from tests.harness import docs
from zuul.configloader.layout import ConfigFile, LayoutLoader
from zuul.driver.registry import default_registry
from zuul.model.tenant import Tenant, TenantProject
from zuul.scheduler.images import image_formats

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGE = os.path.join(TOP, 'doc', 'source', 'reference', 'image-lifecycle.rst')
HOST = 'review.example.org'
IMAGES = TenantProject('gerrit', 'org/images', trusted=True)


def code_blocks(language: str) -> list[str]:
    return docs.code_blocks(PAGE, language)


def test_configuration_examples_load():
    config, jobs, playbook = code_blocks('yaml')
    base = '- job:\n    name: base\n    parent: null\n'
    loader = LayoutLoader(default_registry(),
                          connections={'gerrit': 'gerrit', 'cloud-east': 'openstack'},
                          canonical_hostnames={'gerrit': HOST})
    tenant = Tenant(name='t1', projects=[IMAGES])
    layout = loader.load(tenant, [
        ConfigFile('zuul.d/images.yaml', config, IMAGES, 'master'),
        ConfigFile('zuul.d/jobs.yaml', base + jobs, IMAGES, 'master')])
    assert [e.reason for e in layout.errors if e.severity == 'error'] == []
    assert layout.images['debian-unstable'].type == 'zuul'
    image = layout.pipelines['image']
    assert image.reporters['success']['zuul'] == {'image-built': True,
                                                  'image-validated': False}
    assert layout.pipelines['image-validate'].reporters['success']['zuul'] == \
        {'image-validated': True}
    variants = layout.jobs['build-debian-unstable-image']
    assert variants[0].attributes['image_build_name'] == 'debian-unstable'
    assert sorted(layout.project_pipeline_names('org/images')) == \
        ['image', 'image-delete', 'image-validate']
    canonical = f'{HOST}/org/images/debian-unstable'
    assert image_formats([layout], canonical, {'cloud-east': 'openstack'}) == ['qcow2']
    (provider,) = layout.resolved_providers.values()
    assert provider.images[canonical].settings['keep'] == 2
    [task] = [t for t in yaml.safe_load(playbook)[0]['tasks'] if 'zuul_return' in t]
    [artifact] = task['zuul_return']['data']['zuul']['artifacts']
    assert artifact['metadata']['type'] == 'zuul_image'
