"""What a Spark process keeps by key between tasks, within a bound (tiered.spark.kept.Kept), against a model."""

from __future__ import annotations

import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from tiered.spark.kept import Kept


class _Value:
    made = 0

    def __init__(self, key: str) -> None:
        self.key = key
        self.closed = 0
        _Value.made += 1


@settings(max_examples=200, deadline=None)
@given(limit=st.integers(1, 3),
       steps=st.lists(st.tuples(st.sampled_from(["enter", "exit"]), st.sampled_from("abcde")), max_size=40))
def test_the_most_recently_used_are_kept_and_the_rest_closed_once_nothing_holds_them(
        limit: int, steps: list[tuple[str, str]]) -> None:
    kept: Kept[str, _Value] = Kept(lambda: limit, lambda v: setattr(v, "closed", v.closed + 1))
    held: dict[str, list] = {}  # key -> its open context managers, innermost last
    seen: list[_Value] = []
    order: list[str] = []  # the model: keys by recency, least recent first
    for action, key in steps:
        if action == "enter":
            cm = kept.use(key, lambda key=key: _Value(key))
            value = cm.__enter__()
            assert value is not None and value.key == key and value.closed == 0  # never a closed one
            if value not in seen:
                seen.append(value)
            held.setdefault(key, []).append((cm, value))
            if key in order:
                order.remove(key)
            order.append(key)
            del order[:-limit]
        elif held.get(key):
            cm, _value = held[key].pop()
            cm.__exit__(None, None, None)
        in_use = {id(v) for stack in held.values() for _, v in stack}
        kept_now = {id(v) for v in kept.values()}
        assert [v.key for v in kept.values()] == order  # the limit's most recently used, in order
        for v in seen:
            if id(v) in kept_now or id(v) in in_use:
                assert v.closed == 0, v.key  # kept, or still held: open
            else:
                assert v.closed == 1, v.key  # retired and let go: closed exactly once
    for stack in held.values():
        for cm, _ in reversed(stack):
            cm.__exit__(None, None, None)
    kept.close_all()
    assert all(v.closed == 1 for v in seen) and len(kept) == 0


def test_a_key_built_by_two_threads_at_once_keeps_one_and_closes_the_other() -> None:
    closed: list[_Value] = []
    kept: Kept[str, _Value] = Kept(lambda: 2, closed.append)
    both_building = threading.Barrier(2)

    def build() -> _Value:
        both_building.wait(timeout=60)
        return _Value("a")

    got: list[_Value] = []

    def use() -> None:
        with kept.use("a", build) as value:
            assert value is not None
            got.append(value)

    threads = [threading.Thread(target=use) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got[0] is got[1]  # both used the one kept
    assert len(closed) == 1 and closed[0] is not got[0]
    assert kept.values() == [got[0]]


def test_a_build_that_gives_nothing_keeps_nothing() -> None:
    kept: Kept[str, _Value] = Kept(lambda: 2, lambda v: None)
    with kept.use("a", lambda: None) as value:
        assert value is None
    assert len(kept) == 0
