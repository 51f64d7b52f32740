"""The docs site's reference pages (docs/reference/) are what scripts/docs_reference.py writes from the code:
a page that differs fails here, a changed default or description makes the settings page differ and names
the setting, every setting and every command has a section with a description, and the EC2 spec's
documented defaults are the ones ``load_spec`` applies."""

from __future__ import annotations

import argparse
import ast
import copy
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from cloud.ec2.spec import load_spec
from cloud.ec2.spec_schema import SCHEMA as SPEC_SCHEMA
from deploy.contract import settings
from deploy.contract.data_keys import PROPERTIES
from deploy.contract.paths import repo_root

ROOT = repo_root()


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "scripts" / "docs_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("docs_reference", module)
    spec.loader.exec_module(module)
    return module


docs = _load()


def on_disk(name: str) -> str:
    return (ROOT / "docs" / "reference" / name).read_text()


def section(page: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of any level."""
    at = page.index(heading + "\n")
    rest = page[at + len(heading) + 1 :]
    following = re.search(r"^#{1,3} ", rest, flags=re.MULTILINE)
    return rest[: following.start()] if following else rest


@pytest.mark.parametrize("name", list(docs.PAGES))
def test_every_reference_page_is_what_the_code_writes(name: str) -> None:
    path = docs.REFERENCE / name
    problems = docs.stale({path: docs.PAGES[name]()})
    assert not problems, "\n".join(problems) + "\nRun `make docs-reference` and commit the pages."


def test_a_changed_default_makes_the_settings_page_stale_naming_the_setting() -> None:
    defaults = settings.defaults()
    defaults["ray_head_wait_s"] += 1

    text = docs.settings_page(defaults=defaults)

    assert text != on_disk("settings.md")
    assert "ray_head_wait_s" in docs.changed_sections(on_disk("settings.md"), text)
    [problem] = docs.stale({docs.REFERENCE / "settings.md": text})
    assert problem.startswith("docs/reference/settings.md is stale (sections: ") and "ray_head_wait_s" in problem
    assert f"ray_head_wait_s = {defaults['ray_head_wait_s']}" in problem  # the diff shows the new default


def test_a_changed_description_makes_the_settings_page_stale_naming_the_setting() -> None:
    properties = copy.deepcopy(PROPERTIES)
    properties["checks_timeout_s"]["description"] = "The checks may take as long as they like."

    text = docs.settings_page(properties=properties)

    assert text != on_disk("settings.md")
    assert docs.changed_sections(on_disk("settings.md"), text) == ["checks_timeout_s"]
    assert "The checks may take as long as they like." in section(text, "### `checks_timeout_s`")


def test_a_changed_port_description_makes_the_ports_page_stale() -> None:
    properties = copy.deepcopy(PROPERTIES)
    properties["ray_ports"]["properties"]["gcs"]["description"] = "Something else."
    assert docs.ports_page(properties=properties) != on_disk("ports.md")


def _names_in_all_py() -> list[str]:
    tree = ast.parse(settings.DEFAULTS_FILE.read_text())
    return [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)]


def test_every_name_in_all_py_has_its_section_with_a_description_and_its_default() -> None:
    page = on_disk("settings.md")
    names = _names_in_all_py()
    assert len(names) >= 90 and set(names) == set(settings.defaults())
    block = page[page.index("```python\n") : page.index("\n```\n")]
    for name in names:
        text = section(page, f"### `{name}`")
        description = text.strip().split("\n\n")[0]
        assert description and not description.startswith("|"), name
        assert description == PROPERTIES[name]["description"]
        assert re.search(rf"^{name} = ", block, flags=re.MULTILINE), name
        assert "| Read by |" in text and "| Accepts |" in text


def test_the_steps_that_read_a_setting_come_from_the_code() -> None:
    assert docs.readers("nvidia_driver") == (["nvidia"], ["deploy/host/nvidia.py"])
    assert docs.readers("checks_timeout_s")[0] == ["post_deploy_checks"]
    assert docs.readers("storage_mountpoint_sha256")[0] == ["storage"]
    steps, files = docs.readers("ray_drain_timeout_s")
    assert steps == ["remove_from_cluster"] and files == ["deploy/ray/absent.py"]


def test_every_command_has_its_section_with_a_description() -> None:
    page = on_disk("cli.md")
    parsers = list(docs.commands(docs.rayrig_parser()))
    assert len(parsers) > 20
    for command, help_text in parsers:
        assert command.prog == "rayrig" or help_text, f"{command.prog}: no help text in its parser"
        level = "##" if command.prog == "rayrig" else "###"
        text = section(page, f"{level} `{command.prog}`")
        assert text.strip().split("\n\n")[0], command.prog
        assert f"usage: {command.prog}" in text
        for action in command._actions:  # every argument says what it is, not only its default
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help and not action.help.startswith("default"), f"{command.prog} {action.dest}"
    assert "### `rayrig cloud up`" in page and "### `rayrig status`" in page


def test_the_cli_page_is_the_same_in_any_terminal_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setenv("RAYRIG_LAB", "someone-elses-lab")
    assert docs.cli_page() == on_disk("cli.md")


def test_check_exits_1_naming_the_stale_page_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, render in docs.PAGES.items():
        (tmp_path / name).write_text(render())
    (tmp_path / "ports.md").write_text(on_disk("ports.md").replace("| 6379 |", "| 7000 |"))
    monkeypatch.setattr(docs, "REFERENCE", tmp_path)

    assert docs.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'ports.md'} is stale" in err and "make docs-reference" in err
    assert "settings.md" not in err
    assert "| 7000 |" in (tmp_path / "ports.md").read_text()

    (tmp_path / "ports.md").write_text(docs.ports_page())
    assert docs.main(["--check"]) == 0


def _described(schema: dict[str, Any], path: str = "") -> list[str]:
    """The spec's keys without a description."""
    missing = []
    for key, spec in schema.get("properties", {}).items():
        if not spec.get("description"):
            missing.append(path + key)
        item = spec.get("items", spec)
        if isinstance(item, dict) and "properties" in item:
            missing += _described(item, f"{path}{key}.")
    return missing


def test_every_key_of_the_ec2_spec_has_a_description() -> None:
    assert _described(SPEC_SCHEMA) == []


def test_the_ec2_specs_documented_defaults_are_the_ones_load_spec_applies(tmp_path: Path) -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    private = tmp_path / "id_ed25519"
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
    )
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    (tmp_path / "id_ed25519.pub").write_bytes(public + b" test@rayrig\n")
    path = tmp_path / "spec.toml"
    path.write_text(
        'name = "sprint"\nregion = "us-east-1"\nowner = "a@example.com"\nttl = "1d"\n'
        'admin_cidrs = ["198.51.100.0/24"]\nssh_public_key = "id_ed25519.pub"\n\n'
        '[ami]\nid = "ami-0123456789abcdef0"\n\n[head]\ninstance_type = "m5.xlarge"\n\n'
        '[[workers]]\nname = "gpu"\ninstance_type = "g5.xlarge"\ncount = 1\n'
    )
    spec = load_spec(path)

    documented = []
    for where, table, loaded in (
        ("", SPEC_SCHEMA, spec),
        ("network.", SPEC_SCHEMA["properties"]["network"], spec.network),
        ("head.", SPEC_SCHEMA["properties"]["head"], spec.head),
        ("workers.", SPEC_SCHEMA["properties"]["workers"]["items"], spec.workers[0]),
    ):
        for name, property_ in table["properties"].items():
            if "default" in property_:
                documented.append(where + name)
                assert getattr(loaded, name) == property_["default"], where + name
    assert len(documented) >= 12
