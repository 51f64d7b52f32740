"""Which network NCCL uses, from its INFO log lines (as NCCL and aws-ofi-nccl write them), and the
checks' per-node report with a WARN for an EFA host whose NCCL does not use its EFA."""

from __future__ import annotations

from pathlib import Path

import pytest

from checks import nccl_net
from checks.allreduce import AllreduceRank
from checks.reasons import INFO, WARN
from tests.unit.test_checks_full import BENCH, HEAD_IP, NO_GPUS, RUNNING, WORKER_IP, FakeNode, alive, run, settings

#: A p4d rank's log in the format of aws-ofi-nccl 1.7 (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET).
EFA_OLD = """\
ip-10-42-0-7:81:81 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ^docker,lo,veth
ip-10-42-0-7:81:81 [0] NCCL INFO Bootstrap : Using ens32:10.42.0.7<0>
ip-10-42-0-7:81:81 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.7.4-aws
ip-10-42-0-7:81:81 [0] NCCL INFO NET/OFI Using CUDA driver version 12020
ip-10-42-0-7:81:81 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)
ip-10-42-0-7:81:81 [0] NCCL INFO Using network AWS Libfabric
ip-10-42-0-7:81:81 [0] NCCL INFO DMA-BUF is available on GPU device 0
"""
#: A p5 rank's log with a newer plugin, whose line names the fabric too.
EFA_NEW = """\
ip-10-42-0-9:77:77 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.13.2
ip-10-42-0-9:77:77 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 32 nics)
ip-10-42-0-9:77:77 [0] NCCL INFO Using network AWS Libfabric
"""
#: An image without aws-ofi-nccl: NCCL falls back to its sockets.
SOCKET_LOG = """\
ip-10-42-0-9:77:77 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.
ip-10-42-0-9:77:77 [0] NCCL INFO NET/IB : No device found.
ip-10-42-0-9:77:77 [0] NCCL INFO NET/Socket : Using [0]ens32:10.42.0.9<0>
ip-10-42-0-9:77:77 [0] NCCL INFO Using network Socket
"""
#: The plugin found, but libfabric fell back to TCP (no EFA device in the container).
OFI_TCP = """\
h:1:1 [0] NCCL INFO NET/OFI Selected Provider is tcp (found 1 nics)
h:1:1 [0] NCCL INFO Using network AWS Libfabric
"""


@pytest.mark.parametrize(
    ("log", "network"),
    [
        (EFA_OLD, nccl_net.EFA),
        (EFA_NEW, nccl_net.EFA),
        (SOCKET_LOG, nccl_net.SOCKET),
        (OFI_TCP, "libfabric tcp"),
        ("h:1:1 [0] NCCL INFO Using network IB\n", "InfiniBand"),
        ("h:1:1 [0] NCCL INFO cudaDriverVersion 12020\n", None),
        ("", None),
    ],
)
def test_the_network_nccl_names_in_its_log(log: str, network: str | None) -> None:
    assert nccl_net.network_of(log.splitlines()) == network


def test_a_rank_reads_its_own_nccl_log_and_removes_it(tmp_path: Path) -> None:
    rank = AllreduceRank()
    rank.nccl_log = str(tmp_path / "nccl.log")
    assert rank.nccl_network() is None  # NCCL wrote nothing (gloo, or no collective yet)
    Path(rank.nccl_log).write_text(EFA_OLD)
    assert rank.nccl_network() == nccl_net.EFA
    assert not Path(rank.nccl_log).exists()


def test_the_debug_environment_sends_nccl_s_log_to_the_rank_s_file() -> None:
    assert nccl_net.debug_env("/tmp/x.log") == {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
        "NCCL_DEBUG_FILE": "/tmp/x.log",
    }


NAMES = {HEAD_IP: "head", WORKER_IP: "gpu-1"}


def nccl_allreduce(*networks: str | None, per_node: int = 2) -> dict:
    """An NCCL all-reduce's result whose ranks (``per_node`` on the head, then on the worker) saw ``networks``."""
    ips = [HEAD_IP, WORKER_IP]
    ranks = [{"rank": i, "ip": ips[i // per_node], "nccl_network": net} for i, net in enumerate(networks)]
    return {"backend": "nccl", "world_size": len(ranks), "ranks": ranks}


def test_each_node_s_network_is_said_once() -> None:
    reasons = nccl_net.network_reasons(nccl_allreduce("Socket", "Socket", nccl_net.EFA, nccl_net.EFA), [], NAMES)
    assert [(r.level, r.message, r.host) for r in reasons] == [
        (INFO, "head: NCCL network: Socket", "head"),
        (INFO, "gpu-1: NCCL network: EFA (libfabric efa)", "gpu-1"),
    ]


def test_an_efa_host_whose_nccl_uses_sockets_is_a_warning_naming_it() -> None:
    reasons = nccl_net.network_reasons(nccl_allreduce(None, None, "Socket", "Socket"), ["gpu-1"], NAMES)
    warnings = [r for r in reasons if r.level == WARN]
    assert len(warnings) == 1 and warnings[0].host == "gpu-1"
    assert warnings[0].message.startswith("gpu-1: declared an EFA host (ray_efa) but NCCL uses Socket")
    assert "aws-ofi-nccl" in warnings[0].message


def test_an_efa_host_whose_nccl_did_not_say_is_a_warning_too() -> None:
    reasons = nccl_net.network_reasons(nccl_allreduce(None, None), ["head"], NAMES)
    assert [r.message.split(":")[1].strip() for r in reasons] == [
        "declared an EFA host (ray_efa) but NCCL's log did not say which network it uses"
    ]


def test_an_efa_host_using_its_efa_and_clusters_without_nccl_say_nothing_wrong() -> None:
    assert all(
        r.level == INFO for r in nccl_net.network_reasons(nccl_allreduce(nccl_net.EFA, nccl_net.EFA), ["head"], NAMES)
    )
    gloo = {"backend": "gloo", "ranks": [{"ip": HEAD_IP}]}
    assert nccl_net.network_reasons(gloo, ["head"], NAMES) == []  # no NCCL ran: nothing to tell
    assert nccl_net.network_reasons(None, ["head"], NAMES) == []


def test_the_checks_warn_when_an_efa_host_s_nccl_uses_sockets(tmp_path: Path) -> None:
    bench = {**BENCH, "allreduce": {**BENCH["allreduce"], **nccl_allreduce(nccl_net.EFA, "Socket", per_node=1)}}
    answers = {"probe": RUNNING, "cluster_state": alive(HEAD_IP, WORKER_IP)}
    head = FakeNode("head", HEAD_IP, answers, report=bench)
    worker = FakeNode("gpu-1", WORKER_IP, {"probe": RUNNING})
    every = {"head": settings(tmp_path), "gpu-1": settings(tmp_path, ray_efa=True)}

    outcome, _ = run([head, worker], every, {"head": NO_GPUS, "gpu-1": NO_GPUS})

    said = [str(r) for r in outcome.verdict.reasons]
    assert "INFO: head: NCCL network: EFA (libfabric efa)" in said
    assert "INFO: gpu-1: NCCL network: Socket" in said
    assert any(s.startswith("WARN: gpu-1: declared an EFA host (ray_efa) but NCCL uses Socket") for s in said)
    assert outcome.verdict.status == "WARN"
