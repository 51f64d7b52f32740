"""The cluster's membership: the record each member keeps, and when a limited run must stop."""

from __future__ import annotations

from deploy.contract.schema import validate_cluster
from deploy.ray.membership import Host, cluster_membership, membership_problem, parse_record, record_text

MEMBERS = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]


def cluster(in_run: set[str], recorded: dict[str, list[str] | None], **flags: dict[str, bool]) -> list[Host]:
    names = {"head": "10.0.0.1", "w1": "10.0.0.2", "w2": "10.0.0.3"}
    return [
        Host(
            name=name,
            address=address,
            absent=flags.get("absent", {}).get(name, False),
            depends=flags.get("depends", {}).get(name, True),
            in_run=name in in_run,
            recorded=None if recorded.get(name) is None else tuple(recorded[name]),
        )
        for name, address in names.items()
    ]


def test_the_record_reads_back_what_it_holds():
    members = cluster_membership(["10.0.0.2", "10.0.0.1", "10.0.0.2"], ["192.168.100.0/24"])
    assert members == ["10.0.0.1", "10.0.0.2", "192.168.100.0/24"]
    assert parse_record(record_text(members).splitlines()) == members


def test_a_limited_run_on_a_new_host_names_the_hosts_it_leaves_out():
    problem = membership_problem(cluster({"w2"}, {}), MEMBERS)
    assert problem is not None
    assert "w2 (10.0.0.3) is new to the cluster" in problem
    assert "the firewall member sets or NFS exports of head, w1 do not follow" in problem
    assert "--limit w2 --limit head --limit w1" in problem


def test_a_limited_run_on_a_member_whose_record_matches_goes_on():
    assert membership_problem(cluster({"w2"}, {"w2": MEMBERS}), MEMBERS) is None


def test_a_record_that_differs_says_who_joins_and_who_leaves():
    problem = membership_problem(cluster({"w1"}, {"w1": ["10.0.0.1", "10.0.0.2", "10.0.0.9"]}), MEMBERS)
    assert problem is not None
    assert "the members recorded on w1 differ from this inventory's (joining: 10.0.0.3; leaving: 10.0.0.9)" in problem


def test_hosts_left_out_that_depend_on_no_member_do_not_stop_the_run():
    depends = {"head": False, "w1": False}
    assert membership_problem(cluster({"w2"}, {}, depends=depends), MEMBERS) is None


def test_a_run_of_every_host_is_never_stopped():
    assert membership_problem(cluster({"head", "w1", "w2"}, {}), MEMBERS) is None


def test_an_absent_host_in_the_run_stops_it_until_its_record_is_gone():
    absent = {"w2": True}
    members = MEMBERS[:2]
    problem = membership_problem(cluster({"w2"}, {"w2": MEMBERS}, absent=absent), members)
    assert problem is not None and 'w2 (10.0.0.3) leaves the cluster (ray_state = "absent")' in problem
    assert membership_problem(cluster({"w2"}, {}, absent=absent), members) is None  # already removed


def test_the_head_and_the_nfs_server_cannot_be_absent():
    nfs = {"storage_nfs_server": "w1", "storage_nfs_exports": [{"path": "/srv/shared"}]}
    hosts = [
        ("head", {"ray_role": "head", "ray_state": "absent", **nfs}, "10.0.0.1"),
        ("w1", {"ray_role": "worker", "ray_state": "absent", **nfs}, "10.0.0.2"),
    ]
    problems = [str(p) for p in validate_cluster(hosts)]
    assert "host head: ray_state = 'absent': expected \"present\" on the head" in problems[0]
    assert "host w1: ray_state = 'absent': expected \"present\" on storage_nfs_server" in problems[1]
    assert len(problems) == 2


def test_ray_state_takes_present_or_absent_only():
    problems = [str(p) for p in validate_cluster([("head", {"ray_role": "head", "ray_state": "gone"}, "10.0.0.1")])]
    assert problems == ['host head: ray_state = \'gone\': expected "present" or "absent" (drained and removed)']
