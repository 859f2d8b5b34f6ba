"""Loop locks over a real ZooKeeper: held across passes, handed over
after a turn, taken over when the holder's session ends."""

from __future__ import annotations

import threading

from tests.harness.waiting import wait_for
from zuul.launcher.locks import LoopLock

PATH = '/zuul/launcher/test-lock'


def test_held_across_passes_and_handed_over_after_a_turn(zk_chroot):
    woken = threading.Event()
    a = LoopLock(zk_chroot.client(), PATH, 'a', hold_time=0.3, retry=60)
    b = LoopLock(zk_chroot.client(), PATH, 'b', hold_time=0.3, retry=60, wake=woken.set)
    assert a.acquire()
    assert not b.acquire()
    assert a.acquire()          # still a's: no new contender
    a.pass_done()               # within its turn: kept
    assert a.held
    wait_for(lambda: (a.pass_done(), not a.held)[1], timeout=5, what="a's turn over")
    assert woken.wait(5)        # b watched the holder's node
    assert b.acquire()
    assert not a.acquire()


def test_taken_over_when_the_holder_session_ends(zk_chroot):
    holder_client = zk_chroot.client()
    woken = threading.Event()
    a = LoopLock(holder_client, PATH, 'a', hold_time=60, retry=60)
    b = LoopLock(zk_chroot.client(), PATH, 'b', hold_time=60, retry=60, wake=woken.set)
    assert a.acquire()
    assert not b.acquire()
    zk_chroot.expire_session(holder_client)
    assert woken.wait(10)
    assert b.acquire()
    # The old holder notices it lost the lock and does not run a pass.
    wait_for(lambda: holder_client.connected, timeout=10, what='a reconnected')
    assert not a.acquire()
    assert not a.held
