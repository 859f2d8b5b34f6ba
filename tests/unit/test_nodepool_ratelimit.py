"""A provider's ``rate``: API calls spaced at least that far apart, in
the framework, whatever the driver."""

from __future__ import annotations

import threading

from nodepool.config import load_config_text
from nodepool.driver import InstanceSpec
from nodepool.driver.simulated.adapter import SimulatedAdapter
from nodepool.launcher.ratelimit import RateLimitedAdapter, RateLimiter, rate_limited


class FakeTime:
    """A clock that only moves when someone sleeps."""

    def __init__(self):
        self.now = 100.0
        self.sleeps = []
        self.lock = threading.Lock()

    def clock(self):
        return self.now

    def sleep(self, seconds):
        with self.lock:
            self.sleeps.append(seconds)


def test_slots_are_spaced_by_the_rate():
    t = FakeTime()
    limiter = RateLimiter(2.0, clock=t.clock, sleep=t.sleep)
    assert limiter.wait() == 0           # the first call goes at once
    assert limiter.wait() == 2.0         # the next waits a full interval
    assert limiter.wait() == 4.0         # and the one after it its own turn
    assert t.sleeps == [2.0, 4.0]


def test_an_idle_provider_is_called_at_once():
    t = FakeTime()
    limiter = RateLimiter(2.0, clock=t.clock, sleep=t.sleep)
    limiter.wait()
    t.now += 1.5                          # part of the interval has passed
    assert limiter.wait() == 0.5
    t.now += 10                           # long idle: no debt carried over
    assert limiter.wait() == 0
    assert limiter.wait() == 2.0


def test_concurrent_callers_get_distinct_slots():
    t = FakeTime()
    limiter = RateLimiter(1.0, clock=t.clock, sleep=t.sleep)
    waits = []
    lock = threading.Lock()

    def call():
        waited = limiter.wait()
        with lock:
            waits.append(waited)
    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(waits) == [float(i) for i in range(8)]


def provider(rate: float):
    config = load_config_text(f"""
labels: [{{name: small}}]
providers:
  - name: sim
    driver: simulated
    rate: {rate}
    pools: [{{name: main, labels: [{{name: small}}]}}]
""")
    return config.providers['sim']


def test_api_calls_wait_other_calls_pass_through():
    t = FakeTime()
    inner = SimulatedAdapter(provider(0.5))
    adapter = RateLimitedAdapter(inner, 0.5, RateLimiter(0.5, clock=t.clock, sleep=t.sleep))
    spec = InstanceSpec(name='sim-1', node_id='0000000001', provider='sim', pool='main',
                        label='small')
    external_id = adapter.create(spec)
    assert adapter.poll(external_id).ready
    assert [i.external_id for i in adapter.list()] == [external_id]
    adapter.delete(external_id)
    assert t.sleeps == [0.5, 1.0, 1.5]   # create went at once; three more waited
    adapter.quota()                       # not an API call: no wait
    adapter.hold_boots()                  # driver-specific parts are reachable
    assert inner.cloud.held()
    assert adapter.reuses_nodes is False and adapter.provider.rate == 0.5
    assert t.sleeps == [0.5, 1.0, 1.5]


def test_no_rate_no_wrapper():
    inner = SimulatedAdapter(provider(0))
    assert rate_limited(inner, 0) is inner
    assert isinstance(rate_limited(inner, 0.1), RateLimitedAdapter)
