"""One piece of work per node, every node at once (checks/fanout.py): the answers in the items' order,
the late ones left behind, not waited for."""

from __future__ import annotations

import threading
import time

import pytest

from checks.fanout import each_at_once


def test_every_item_runs_at_once_and_the_answers_keep_the_items_order():
    started = time.monotonic()
    answers = each_at_once([0.6, 0.2, 0.4], lambda s: time.sleep(s) or f"slept {s}", limit_s=10)
    assert time.monotonic() - started < 1.1  # 1.2 s of sleeping, side by side
    assert [a.value for a in answers] == ["slept 0.6", "slept 0.2", "slept 0.4"]
    assert not any(a.late for a in answers)
    assert answers[1].seconds < answers[0].seconds


def test_an_item_that_does_not_answer_is_left_behind_at_the_limit():
    release = threading.Event()
    try:
        started = time.monotonic()
        answers = each_at_once(["quick", "hung"], lambda x: release.wait(30) if x == "hung" else x, limit_s=0.5)
        assert time.monotonic() - started < 2
    finally:
        release.set()
    assert (answers[0].value, answers[0].late) == ("quick", False)
    assert answers[1].late and answers[1].value is None and answers[1].seconds >= 0.5


def test_an_error_is_raised_not_kept():
    def work(x: int) -> int:
        if x == 2:
            raise ConnectionError("the connection dropped")
        return x

    with pytest.raises(ConnectionError, match="dropped"):
        each_at_once([1, 2, 3], work, limit_s=5)


def test_no_items_no_work():
    assert each_at_once([], lambda x: x, limit_s=1) == []
