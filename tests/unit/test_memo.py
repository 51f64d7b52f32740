"""Values read once per run: every host's load of the deploy file runs at once, in greenlets."""

from __future__ import annotations

import gevent

from deploy.run.facts import fact
from deploy.run.memo import run_lock


class State:
    """Stands for pyinfra's State: a key of the run's memo (weakly held)."""


class Host:
    def __init__(self, name: str, state: State):
        self.name = name
        self.state = state
        self.reads = 0

    def get_fact(self, cls, *args):
        self.reads += 1
        gevent.sleep(0.01)  # the command's round trip: other greenlets run meanwhile
        return f"{cls.__name__}{args}"


class SomeFact:
    pass


def test_twelve_hosts_loading_at_once_read_a_shared_fact_once():
    head = Host("head", State())
    loads = [gevent.spawn(fact, head, SomeFact, "x") for _ in range(12)]
    gevent.joinall(loads, raise_error=True)
    assert [g.value for g in loads] == ["SomeFact('x',)"] * 12
    assert head.reads == 1  # not 12 commands over the head's one SSH connection (sshd allows 10)


def test_different_facts_and_runs_do_not_share_a_read():
    state = State()
    head = Host("head", state)
    gevent.joinall([gevent.spawn(fact, head, SomeFact, "x"), gevent.spawn(fact, head, SomeFact, "y")])
    assert head.reads == 2
    other_run = Host("head", State())
    fact(other_run, SomeFact, "x")
    assert other_run.reads == 1
    assert run_lock(state, "a") is run_lock(state, "a") and run_lock(state, "a") is not run_lock(state, "b")
