"""A dependent pipeline asks, for every item at every pass, whether the
changes it needs are still ahead of it (or merged). The answer comes from
the dependencies as read before: the source is asked again only when one
seems missing (it may have merged since), never at every pass."""

from types import SimpleNamespace

from zuul.model.change import Change
from zuul.scheduler.context import SchedulerContext


class CountingSource:
    """Reads dependencies as a Gerrit connection does: once per change
    object, again after ``forget_needed``; ``merged`` is the source's
    truth, which the objects read before do not see."""

    def __init__(self, needs):
        self.needs = needs
        self.merged: set[int] = set()
        self.reads = 0

    def get_needed_changes(self, change, connections):
        if getattr(change, 'needed_read', None) is None:
            self.reads += 1
            change.needed_read = [
                _change(n, 'MERGED' if n in self.merged else 'NEW')
                for n in self.needs.get(change.number, ())]
        return list(change.needed_read)

    @staticmethod
    def forget_needed(change):
        change.needed_read = None


def _change(number, status='NEW'):
    return Change(connection='review', project='org/p', ref=f'refs/changes/{number}',
                  number=number, patchset=1, status=status)


def _item(change, ahead):
    return SimpleNamespace(change=change, bundle=None,
                           items_ahead=lambda: [SimpleNamespace(change=c) for c in ahead])


def test_needed_changes_are_read_again_only_when_one_seems_missing():
    source = CountingSource({2: [1]})
    connections = SimpleNamespace(get=lambda name: source)
    ctx = SchedulerContext(SimpleNamespace(layouts=None, connections=connections),
                           SimpleNamespace(layout=None))
    one, two = _change(1), _change(2)
    ahead = [one]
    item = _item(two, ahead)
    for _ in range(50):     # fifty passes, the dependency ahead
        assert ctx.missing_needed_changes(item) is None
    assert source.reads == 1
    # It merged and left the queue: what was read says "open, not ahead";
    # read again, it is merged, so nothing is missing.
    source.merged.add(1)
    ahead.clear()
    assert ctx.missing_needed_changes(item) is None
    assert source.reads == 2
    for _ in range(50):
        assert ctx.missing_needed_changes(item) is None
    assert source.reads == 2
    # Left unmerged: missing, after reading again to be sure.
    three = _item(_change(3), [])
    source.needs[3] = [4]
    assert ctx.missing_needed_changes(three) == _change(4).describe()
    assert source.reads == 4
