"""Management requests of the scheduler on ref items: a ref enqueued
with a new revision is dequeued by naming its ref (the real Scheduler,
managers and Layouts; tests/unit/scheduler_support.py)."""

from __future__ import annotations

import pytest

from tests.unit.scheduler_support import enqueue_ref, start_system
from zuul.model.errors import UnknownNameError

CONFIG = """
- pipeline:
    name: post
    manager: supercedent
    trigger: {}
- job:
    name: base
    parent: null
- job:
    name: publish
- project:
    name: org/proj
    post:
      jobs: [publish]
"""

MAIN = """
- tenant:
    name: t1
    source:
      gerrit:
        config-projects: [org/config]
        untrusted-projects: [org/proj]
"""


def test_a_ref_item_is_dequeued_by_its_ref(tmp_path):
    scheduler, executor = start_system(tmp_path, MAIN, {'org/config': {'master': CONFIG},
                                                         'org/proj': {'master': ''}})
    try:
        enqueue_ref(scheduler, 't1', 'post', 'org/proj')
        manager = scheduler.get_manager('t1', 'post')
        assert [i.change.ref for i in manager.all_items()] == ['refs/heads/master']
        assert scheduler.management('dequeue', tenant='t1', pipeline='post',
                                    project='org/proj', ref='refs/heads/master')
        assert list(manager.all_items()) == []
        with pytest.raises(UnknownNameError):
            scheduler.management('dequeue', tenant='t1', pipeline='post',
                                 project='org/proj', ref='refs/heads/master')
    finally:
        scheduler.stop()
