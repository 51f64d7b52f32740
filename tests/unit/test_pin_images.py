"""``scripts/pin-images.py``: the default images pinned by digest, checked against their tags.

No registry is reachable here: skopeo is stood in for by a script that serves one manifest, so the
digest arithmetic and the rewrite of all.py are checked, and the real skopeo is left to the user's
machine (docs/guides/images.md).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import stat
import sys
from pathlib import Path

import pytest

from deploy.contract import settings
from deploy.contract.paths import repo_root
from deploy.host import image_mirror

_spec = importlib.util.spec_from_file_location("pin_images", repo_root() / "scripts" / "pin-images.py")
pin_images = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("pin_images", pin_images)
_spec.loader.exec_module(pin_images)

PINNED_KEYS = ("monitoring_node_exporter_image", "monitoring_prometheus_image", "monitoring_grafana_image")


def test_the_monitoring_defaults_are_pinned_by_digest_and_the_script_finds_each_of_them():
    defaults = settings.defaults()
    found = dict(pin_images.pinned_images(pin_images.ALL_PY.read_text()))
    for key in PINNED_KEYS:
        name, digest = image_mirror.split_digest(defaults[key])
        assert digest and len(digest) == len("sha256:") + 64, key
        assert found[name] == digest, key
    assert len(found) == len(PINNED_KEYS)
    # the two a digest could not be checked for stay tags (the docs say so)
    assert "@" not in defaults["ray_image"] and "@" not in defaults["monitoring_gpu_exporter_image"]


@pytest.fixture
def registry_of_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> bytes:
    """A stand-in ``skopeo`` on PATH that serves one manifest for every reference."""
    manifest = b'{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}'
    (tmp_path / "manifest.json").write_bytes(manifest)
    tool = tmp_path / "skopeo"
    tool.write_text(f'#!/bin/sh\n[ "$1 $2" = "inspect --raw" ] || exit 3\ncat {tmp_path / "manifest.json"}\n')
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return manifest


def test_a_digest_the_tag_no_longer_names_is_reported_and_update_writes_the_new_one(
    registry_of_one: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    now = "sha256:" + hashlib.sha256(registry_of_one).hexdigest()
    copy = tmp_path / "all.py"
    rest = f'b = "x/b:2@{now}"  # two\nc = "x/c:3"  # a tag: not pinned\n'
    copy.write_text(f'a = "quay.io/x/a:v1@sha256:{"0" * 64}"  # one\n' + rest)
    monkeypatch.setattr(pin_images, "ALL_PY", copy)
    assert pin_images.main([]) == 1
    out = capsys.readouterr().out
    assert f"!= quay.io/x/a:v1: all.py pins sha256:{'0' * 64}, the tag names {now}" in out
    assert f"ok x/b:2@{now}" in out
    assert pin_images.main(["--update"]) == 0
    assert copy.read_text() == f'a = "quay.io/x/a:v1@{now}"  # one\n' + rest
    assert pin_images.main([]) == 0
