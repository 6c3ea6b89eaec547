"""SnapshotMemo: data derived from cluster snapshots once per change, found by identity."""
import threading
import weakref

from policies.cluster_view import SnapshotMemo


class Snapshot(list):
    """A list that can be weakly referenced, to see how long the memo keeps it."""


def counting(derive=lambda *snapshots: tuple(len(s) for s in snapshots)):
    calls = []

    def wrapped(*snapshots):
        calls.append(snapshots)
        return derive(*snapshots)

    return wrapped, calls


def test_derives_once_per_snapshot():
    derive, calls = counting()
    memo = SnapshotMemo(derive)
    quotas = Snapshot([{"a": 1}])
    assert memo(quotas) == (1,)
    assert memo(quotas) == (1,)
    assert len(calls) == 1


def test_a_new_snapshot_is_derived_again_even_when_equal():
    """A snapshot is replaced (never edited) when something changed: identity is what counts."""
    derive, calls = counting()
    memo = SnapshotMemo(derive)
    first, second = Snapshot([1]), Snapshot([1])
    memo(first)
    memo(second)
    assert len(calls) == 2
    assert memo(Snapshot([1, 2])) == (2,)


def test_several_snapshots_form_one_key():
    derive, calls = counting()
    memo = SnapshotMemo(derive)
    quotas, ranges, jobs = Snapshot([1]), Snapshot([]), Snapshot([1, 2, 3])
    assert memo(quotas, ranges, jobs) == (1, 0, 3)
    assert memo(quotas, ranges, jobs) == (1, 0, 3)
    changed_jobs = Snapshot([1])
    assert memo(quotas, ranges, changed_jobs) == (1, 0, 1)
    assert memo(ranges, quotas, jobs) == (0, 1, 3)  # order matters
    assert len(calls) == 3


def test_an_entry_keeps_its_snapshots_alive_so_their_ids_are_not_reused():
    memo = SnapshotMemo(lambda s: len(s), size=2)
    first = Snapshot([1])
    alive = weakref.ref(first)
    memo(first)
    del first
    assert alive() is not None  # held by the memo: no other object can take its id
    memo(Snapshot([1, 2]))
    memo(Snapshot([1, 2, 3]))  # the oldest entry goes
    assert alive() is None
    assert len(memo) == 2


def test_bounded_oldest_first():
    derive, calls = counting()
    memo = SnapshotMemo(derive, size=3)
    kept = [Snapshot([i]) for i in range(5)]
    for snapshot in kept:
        memo(snapshot)
    assert len(memo) == 3
    memo(kept[4])
    memo(kept[2])
    assert len(calls) == 5  # the three newest are still there
    memo(kept[0])
    assert len(calls) == 6


def test_concurrent_readers_and_writers():
    memo = SnapshotMemo(lambda s: len(s), size=8)
    snapshots = [Snapshot([0] * i) for i in range(32)]
    errors = []

    def work(offset):
        try:
            for round_ in range(200):
                snapshot = snapshots[(offset + round_) % len(snapshots)]
                assert memo(snapshot) == len(snapshot)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(memo) <= 8
