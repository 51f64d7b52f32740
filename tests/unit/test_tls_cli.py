"""``rayrig tls rotate`` and ``rayrig tls client-cert``: what they refuse before touching anything,
what they do around the deploy, and what they print (paths, never a key)."""

from __future__ import annotations

import stat

import pytest

from deploy.contract import settings
from deploy.ray import tls_ca
from rayrig import run
from rayrig.cli import main
from rayrig.errors import explain

FAKE = "tests/plan/fake_inventory.py"  # a head and two workers, cluster "cluster"
TLS_ON = {"ray_tls": "on", "ray_tls_renew_days": 30, "ray_tls_validity_days": 397, "ray_tls_ca_validity_days": 3650}
SANS = ["10.0.0.5", "127.0.0.1", "localhost"]


@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYRIG_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(tls_ca, "_issued", {})
    return tmp_path / "state"


def tls_defaults(monkeypatch, **values):
    """Every host of the inventories gets these TLS settings (the fake inventory sets none)."""
    real = settings.defaults
    monkeypatch.setattr(settings, "defaults", lambda: {**real(), **TLS_ON, **values})
    return {**settings.merge({}), **TLS_ON, **values}


@pytest.fixture
def cluster(monkeypatch):
    """The fake inventory's settings, with ray_tls on."""
    return tls_defaults(monkeypatch)


@pytest.fixture
def deployed(cluster):
    """A cluster deployed with TLS: the CA and the head's certificate exist."""
    return tls_ca.ensure_node_certificate(cluster, "@fake/head", SANS)


@pytest.fixture
def deploys(monkeypatch):
    """The deploys the command runs: (inventory, extra, env); each exits with ``deploys.status`` and,
    like a real deploy, asks for the head's certificate (``deploys.seen`` keeps what it found)."""

    class Deploys(list):
        status = 0
        seen: list = []

    calls = Deploys()

    def fake_run_pyinfra(inventory, deploy_file="deploy/cluster.py", extra=(), env=None):
        calls.append((inventory, list(extra), env))
        merged = settings.merge({})
        folder = tls_ca.tls_dir(merged)
        calls.seen.append({"previous": sorted(p.name for p in (folder / "previous").glob("*"))})
        calls.seen[-1]["node"] = tls_ca.ensure_node_certificate(merged, "@fake/head", SANS)
        return calls.status

    monkeypatch.setattr(run, "run_pyinfra", fake_run_pyinfra)
    return calls


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_tls_needs_a_subcommand_and_its_arguments(capsys):
    for argv in (["tls"], ["tls", "rotate"], ["tls", "client-cert", FAKE], ["tls", "renew", FAKE]):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2, argv
    assert "usage: rayrig tls" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["rotate"], ["client-cert"]])
def test_a_missing_inventory_is_a_usage_error(capsys, cluster, deploys, command):
    argv = ["tls", *command, "no/such/inventory.py"] + (["alice"] if command == ["client-cert"] else [])
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"rayrig tls {command[0]}: no/such/inventory.py: no such inventory file "
        "(expected a pyinfra inventory such as inventories/prod.py); nothing was changed\n"
    )
    assert deploys == [] and not tls_ca.tls_dir(cluster).exists()


@pytest.mark.parametrize("partial", [["--limit", "@fake/head"], ["--limit=@fake/head"], ["--exclude", "x"]])
def test_a_rotation_of_part_of_the_inventory_is_refused(capsys, deployed, deploys, cluster, partial):
    assert main(["tls", "rotate", FAKE, *partial]) == 2
    option = partial[0].split("=")[0]
    assert capsys.readouterr().err == (
        f"rayrig tls rotate: {option}: a rotation must reach every host of the inventory "
        "(a node left on the previous CA could not talk to the others); nothing was changed\n"
    )
    assert (tls_ca.tls_dir(cluster) / "ca.crt").read_bytes() == deployed.ca_pem
    assert not (tls_ca.tls_dir(cluster) / "previous").exists() and deploys == []


@pytest.mark.parametrize("command", [["rotate", FAKE], ["client-cert", FAKE, "alice"]])
def test_a_cluster_without_tls_is_refused(capsys, monkeypatch, deploys, command):
    off = tls_defaults(monkeypatch, ray_tls="off")
    assert main(["tls", *command]) == 2
    assert capsys.readouterr().err == (
        f"rayrig tls {command[0]}: {FAKE}: ray_tls = 'off': the cluster does not use TLS; "
        'set ray_tls = "on" and deploy; nothing was changed\n'
    )
    assert deploys == [] and not tls_ca.tls_dir(off).exists()


def test_a_rotation_moves_the_ca_aside_deploys_in_rotation_mode_and_then_drops_the_previous(
    capsys, cluster, deployed, deploys
):
    folder = tls_ca.tls_dir(cluster)
    assert main(["tls", "rotate", FAKE, "-v"]) == 0
    assert deploys == [(FAKE, ["-v"], {tls_ca.ROTATION_ENV: "1"})]
    during = deploys.seen[0]
    assert during["previous"] == ["ca.crt", "ca.key", "nodes"]  # begun before the deploy
    assert during["node"].issued and during["node"].ca_pem != deployed.ca_pem  # the deploy made a new CA
    assert not (folder / "previous").exists()  # ended after it
    assert (folder / "ca.crt").read_bytes() == during["node"].ca_pem
    out, err = capsys.readouterr()
    assert f"==> New CA for cluster 'cluster': the deploy creates it in {folder}; the previous one is kept in " in out
    assert f"Every node of cluster 'cluster' runs a certificate of the new CA ({folder / 'ca.crt'})" in out
    assert f"Issue new client certificates with `rayrig tls client-cert {FAKE} NAME`" in out
    assert "PRIVATE KEY" not in out + err and err == ""


def test_a_failed_rotation_says_where_the_cluster_stands_and_a_second_one_finishes_it(
    capsys, cluster, deployed, deploys
):
    folder = tls_ca.tls_dir(cluster)
    deploys.status = 1
    assert main(["tls", "rotate", FAKE]) == 1
    err = capsys.readouterr().err
    assert "rayrig tls rotate: the deploy failed (pyinfra exit status 1); the rotation is not finished" in err
    assert f"run certificates of the new CA, in {folder}." in err
    assert f"still run the previous CA's, kept in {folder / 'previous'}, and cannot talk to the nodes" in err
    assert f"run `rayrig tls rotate {FAKE}` again: it finishes with the same new CA" in err
    assert (folder / "previous" / "ca.crt").read_bytes() == deployed.ca_pem
    new = deploys.seen[0]["node"]

    deploys.status = 0
    tls_ca._issued.clear()  # the second deploy is a new process
    assert main(["tls", "rotate", FAKE]) == 0
    out = capsys.readouterr().out
    assert f"was cut short: finishing it with the CA it made ({folder / 'ca.crt'})" in out
    again = deploys.seen[1]["node"]
    assert not again.issued and again.cert_pem == new.cert_pem  # the head is not restarted a second time
    assert not (folder / "previous").exists()


def test_a_dry_run_puts_the_previous_ca_back(capsys, cluster, deployed, deploys):
    assert main(["tls", "rotate", FAKE, "--dry"]) == 0
    assert deploys[0][1] == ["--dry"]
    folder = tls_ca.tls_dir(cluster)
    assert (folder / "ca.crt").read_bytes() == deployed.ca_pem and not (folder / "previous").exists()
    assert "Dry run: no node was changed, and the local CA is as it was before." in capsys.readouterr().out


def test_a_client_certificate_needs_the_cluster_ca(capsys, cluster):
    assert main(["tls", "client-cert", FAKE, "alice"]) == 2
    ca = tls_ca.tls_dir(cluster) / "ca.crt"
    assert capsys.readouterr().err == (
        f'rayrig tls client-cert: {ca}: the cluster has no CA yet; deploy with ray_tls = "on" first\n'
    )
    assert not ca.exists()


def test_a_bad_client_name_is_a_usage_error(capsys, deployed, cluster):
    assert main(["tls", "client-cert", FAKE, "../alice"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rayrig tls client-cert: client name '../alice': expected 1-64 letters, digits")
    assert not (tls_ca.tls_dir(cluster) / "clients").exists()


def test_an_unusable_ca_fails_naming_its_file(capsys, deployed, cluster):
    (tls_ca.tls_dir(cluster) / "ca.key").unlink()
    assert main(["tls", "client-cert", FAKE, "alice"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rayrig tls client-cert: {tls_ca.tls_dir(cluster) / 'ca.key'}: missing")
    assert "`rayrig tls rotate INVENTORY`" in err


def test_a_client_certificate_prints_the_environment_to_use_it(capsys, deployed, cluster):
    assert main(["tls", "client-cert", FAKE, "alice-laptop"]) == 0
    out, err = capsys.readouterr()
    cert, key = tls_ca.client_files(cluster, "alice-laptop")
    assert mode(key) == 0o600
    exports = [line for line in out.splitlines() if not line.startswith("#")]
    assert exports == [
        "export RAY_USE_TLS=1",
        f"export RAY_TLS_SERVER_CERT={cert}",
        f"export RAY_TLS_SERVER_KEY={key}",
        f"export RAY_TLS_CA_CERT={tls_ca.tls_dir(cluster) / 'ca.crt'}",
    ]
    assert "Client certificate 'alice-laptop' of cluster 'cluster', valid until" in out
    assert "ray://HEAD:10001" in out and "RAY_AUTH_TOKEN_PATH" in out
    assert "PRIVATE KEY" not in out + err and key.read_text().splitlines()[1] not in out


def test_a_client_certificate_copied_to_a_folder(capsys, deployed, cluster, tmp_path):
    out_dir = tmp_path / "laptop" / "tls"
    assert main(["tls", "client-cert", FAKE, "alice", "--out", str(out_dir)]) == 0
    out = capsys.readouterr().out
    assert sorted(p.name for p in out_dir.iterdir()) == ["alice.crt", "alice.key", "ca.crt"]
    assert mode(out_dir) == 0o700 and mode(out_dir / "alice.key") == 0o600
    assert (out_dir / "ca.crt").read_bytes() == deployed.ca_pem
    assert (out_dir / "alice.key").read_bytes() == tls_ca.client_files(cluster, "alice")[1].read_bytes()
    assert f"export RAY_TLS_SERVER_KEY={out_dir / 'alice.key'}\n" in out
    assert f"export RAY_TLS_CA_CERT={out_dir / 'ca.crt'}\n" in out
    assert main(["tls", "client-cert", FAKE, "ca", "--out", str(out_dir)]) == 2
    assert "its certificate would overwrite the CA's copy" in capsys.readouterr().err
    assert (out_dir / "ca.crt").read_bytes() == deployed.ca_pem


def test_a_tls_error_anywhere_is_one_line_and_exit_1_not_a_bug_report():
    failure = explain(tls_ca.TLSError("/s/tls/ca.key: missing, while its pair in /s/tls is there; put it back"))
    assert failure.status == 1 and failure.hint is None
    assert failure.lines("rayrig deploy") == [
        "rayrig deploy: /s/tls/ca.key: missing, while its pair in /s/tls is there; put it back"
    ]
