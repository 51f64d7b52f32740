"""The post-deploy checks expect the cluster's present hosts: a host marked absent has left it."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from deploy import post_checks


class Run:
    """A pyinfra run's state, as far as the checks read it: nothing was replaced in it."""


class Stop(Exception):
    """Ends run_checks once the checks were handed their nodes."""


def _host(name: str, **data: Any) -> Any:
    return SimpleNamespace(name=name, data=SimpleNamespace(dict=lambda: data), connected=True, connector=object(),
                           get_fact=lambda *args: {"pci_count": 0, "nvswitches": 0, "driver": None})  # fmt: skip


@pytest.mark.parametrize("mode, runner", [("full", "run_cluster_checks"), ("quick", "run_quick_checks")])
def test_the_checks_are_given_the_present_hosts_only(monkeypatch, mode, runner):
    common = {"checks_mode": mode, "ray_num_gpus": 0}
    head = _host("head", ray_role="head", ray_node_ip="10.0.0.1", **common)
    hosts = [
        head,
        _host("w1", ray_node_ip="10.0.0.2", **common),
        _host("w2", ray_node_ip="10.0.0.3", ray_state="absent", **common),
    ]
    given = {}

    def checks(nodes: list, head_node: Any, settings: dict, gpus: dict, progress: Any, why: str) -> Any:
        given.update(nodes=[n.name for n in nodes], head=head_node.name, settings=sorted(settings))
        raise Stop

    monkeypatch.setattr(post_checks, "inventory", hosts)
    monkeypatch.setattr(post_checks, "head_host", lambda: head)
    monkeypatch.setattr(post_checks, runner, checks)
    with pytest.raises(Stop):
        post_checks.run_checks(state=Run())
    assert given == {"nodes": ["head", "w1"], "head": "head", "settings": ["head", "w1"]}


def test_the_gpu_facts_are_read_from_every_host_at_once_in_the_hosts_order():
    def slow_host(name: str, seconds: float) -> Any:
        def get_fact(*args: Any) -> dict:
            time.sleep(seconds)
            return {"pci_count": 0, "nvswitches": 0, "driver": None, "read_by": name}

        return SimpleNamespace(name=name, get_fact=get_fact)

    hosts = [slow_host("head", 1.0), slow_host("w1", 0.6), slow_host("w2", 0.2)]
    started = time.monotonic()
    facts = post_checks.gpu_facts(hosts)
    assert time.monotonic() - started < 1.5  # 1.8 s one after another
    assert list(facts) == ["head", "w1", "w2"]
    assert [f["read_by"] for f in facts.values()] == ["head", "w1", "w2"]
