"""The operation order rayrig reads off the frames is pyinfra's own, for every operation of whole deploys.

``deploy/run/pyinfra_costs.py`` replaces pyinfra 3.10's ``get_operation_order_from_stack`` (it reads
every frame's source) with a walk of the frames' line numbers. Here every operation of a fresh and a
converged deploy, GPUs, TLS, storage and monitoring on, asks both at the same point of the stack.
"""

from __future__ import annotations

import pytest

from deploy.run import pyinfra_costs
from deploy.run.pyinfra_costs import arguments, operation
from tests.plan.fakes.fakehosts import reference_cluster
from tests.plan.harness import run_deploy

FEATURES = {"ray_tls": "on", "monitoring_enabled": True}


def test_the_locked_pyinfra_is_the_one_the_faster_functions_were_written_for():
    """A pyinfra whose functions differ keeps its own (slower, same order): this says when to look again."""
    assert pyinfra_costs.matches("get_operation_order_from_stack")
    assert pyinfra_costs.matches("all_global_arguments")
    assert pyinfra_costs.install() == ["get_operation_order_from_stack", "all_global_arguments"]
    assert operation.get_operation_order_from_stack is pyinfra_costs.operation_order
    assert arguments.all_global_arguments is pyinfra_costs.all_global_arguments


@pytest.mark.parametrize("state", ["fresh", "converged"])
def test_every_operation_gets_the_order_pyinfras_own_function_gives(monkeypatch, state):
    asked: list[tuple[list[int], list[int]]] = []
    original = pyinfra_costs.ORIGINALS["get_operation_order_from_stack"]

    def both(s):
        ours, theirs = pyinfra_costs.operation_order(s), original(s)  # one line: the same frame for both
        asked.append((ours, list(theirs)))  # a copy: pyinfra extends the list it gets (loop positions)
        return theirs

    pyinfra_costs.install()  # the deploy file installs them too; then ``both`` takes the slot
    monkeypatch.setattr(operation, "get_operation_order_from_stack", both)
    run = run_deploy(reference_cluster("ubuntu22", state, data=FEATURES))
    assert sum(len(h.ops) for h in run.hosts.values()) > 100  # whole deploys, not a step
    assert len(asked) > 100
    differ = [(ours, theirs) for ours, theirs in asked if ours != theirs]
    assert not differ, f"{len(differ)} of {len(asked)} orders differ, first: {differ[0]}"


def test_the_global_arguments_are_pyinfras_with_their_types():
    theirs = pyinfra_costs.ORIGINALS["all_global_arguments"]()
    assert pyinfra_costs.all_global_arguments() == theirs
    assert ("_sudo", bool) in theirs
