"""The Trainer memos' bounded map: the least recently used entry goes first, and a read counts as use."""
from __future__ import annotations

from policies.trainer.bounded_memo import BoundedMemo


def test_the_least_recently_used_entry_is_dropped_past_the_size():
    memo: BoundedMemo[str, int] = BoundedMemo(2)
    memo.put("a", 1)
    memo.put("b", 2)
    assert memo.get("a") == 1  # "b" is now the least recently used
    memo.put("c", 3)
    assert (memo.get("a"), memo.get("b"), memo.get("c")) == (1, None, 3)
    assert len(memo) == 2


def test_a_put_of_a_known_key_replaces_its_value_without_growing():
    memo: BoundedMemo[str, int] = BoundedMemo(2)
    memo.put("a", 1)
    memo.put("a", 2)
    assert (memo.get("a"), len(memo)) == (2, 1)
    memo.clear()
    assert (memo.get("a"), len(memo)) == (None, 0)
