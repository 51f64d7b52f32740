"""The architecture drawing (docs/explanation/architecture.md) draws the ports the code uses.

Every number in the page's mermaid diagram, IP addresses aside, is a port or a range of ports
(``10002-10999``). Each drawn port must be the default of a port setting (a key of
``inventories/group_data/all.py`` ending in ``_port`` or ``_ports``) or a port the firewall's code
fixes (SSH's default, NFS's); a drawn range must be one of the settings' ranges (Ray's worker range)
or hold default ports only. And every port the firewall opens to the cluster's members with the
defaults, counting the optional ones (the image mirror's, NFS's), must be in the drawing.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from deploy.contract.paths import repo_root
from deploy.contract.ports import WORKER_RANGE, member_ports, port_ranges
from deploy.contract.settings import defaults
from deploy.firewall.nftables import ruleset_values
from deploy.storage.nfs import NFS_PORT

PAGE = repo_root() / "docs" / "explanation" / "architecture.md"
MERMAID = re.compile(r"^```mermaid\n(.*?)^```", re.MULTILINE | re.DOTALL)
IPV4 = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}\b")
NUMBER = re.compile(r"(?<![\w.])(\d+)(?:-(\d+))?(?![\w.])")


def diagram(text: str) -> str:
    blocks = MERMAID.findall(text)
    assert len(blocks) == 1, f"{PAGE}: expected one mermaid diagram, found {len(blocks)}"
    return blocks[0]


def drawn_ports(source: str) -> list[tuple[int, int]]:
    """The numbers of a diagram as (first, last) ranges, a single port as (port, port); IP addresses left out.

    >>> drawn_ports('gcs["GCS :6379 on 127.0.0.1"] --> w["workers :10002-10999"]')
    [(6379, 6379), (10002, 10999)]
    """
    found = []
    for match in NUMBER.finditer(IPV4.sub(" ", source)):
        first = int(match[1])
        found.append((first, int(match[2]) if match[2] else first))
    return found


def _values(value: Any) -> Iterable[int]:
    if isinstance(value, Mapping):
        for inner in value.values():
            yield from _values(inner)
    elif isinstance(value, int) and not isinstance(value, bool):
        yield value


def setting_ports(settings: Mapping[str, Any]) -> dict[int, list[str]]:
    """Every default port -> the settings (or code) it comes from."""
    ports: dict[int, list[str]] = {}
    for key, value in settings.items():
        if key.endswith(("_port", "_ports")):
            for port in _values(value):
                ports.setdefault(port, []).append(key)
    for port in inspect.signature(ruleset_values).parameters["ssh_ports"].default:
        ports.setdefault(port, []).append("SSH (the firewall's default)")
    ports.setdefault(NFS_PORT, []).append("NFS (deploy/storage/nfs.py)")
    return ports


def setting_ranges(settings: Mapping[str, Any]) -> set[tuple[int, int]]:
    first, last = WORKER_RANGE
    return {(settings["ray_ports"][first], settings["ray_ports"][last])}


def member_opened(settings: Mapping[str, Any]) -> list[tuple[int, int]]:
    """What the firewall opens to the members with the defaults, the optional ports included."""
    values = ruleset_values(
        ray_ports=member_ports(settings), members=["192.0.2.1"], nfs_server=True,
        mirror_port=settings["image_mirror_port"], dashboard_host=settings["ray_dashboard_host"],
    )  # fmt: skip
    return port_ranges(values["ray_ports"])


def wrong_ports(drawn: Iterable[tuple[int, int]], settings: Mapping[str, Any]) -> list[str]:
    known, ranges = setting_ports(settings), setting_ranges(settings)
    wrong = []
    for first, last in drawn:
        if first == last and first not in known:
            wrong.append(f"{first}: the default of no port setting")
        elif first != last and (first, last) not in ranges and not all(p in known for p in range(first, last + 1)):
            wrong.append(f"{first}-{last}: neither a setting's range nor default ports only")
    return wrong


def missing_ports(drawn: Iterable[tuple[int, int]], settings: Mapping[str, Any]) -> list[str]:
    drawn = list(drawn)
    return [
        f"{first}-{last}" if first != last else str(first)
        for first, last in member_opened(settings)
        if not any(d_first <= first and last <= d_last for d_first, d_last in drawn)
    ]


def test_every_drawn_port_is_a_default_of_the_code():
    drawn = drawn_ports(diagram(PAGE.read_text()))
    assert drawn, f"{PAGE}: the diagram draws no port"
    assert not wrong_ports(drawn, defaults()), f"{PAGE}: the diagram draws ports the code does not have"


def test_every_port_the_firewall_opens_to_members_is_drawn():
    missing = missing_ports(drawn_ports(diagram(PAGE.read_text())), defaults())
    assert not missing, f"{PAGE}: the diagram lacks ports the firewall opens to the members: {missing}"


def test_the_page_links_the_ports_reference_and_the_security_guide():
    text = PAGE.read_text()
    assert "](../reference/ports.md)" in text and "](../guides/security.md)" in text


# --- The checks themselves fail where they should ---------------------------------------------------


@pytest.fixture
def settings() -> dict[str, Any]:
    return defaults()


def test_a_port_no_setting_has_is_named(settings):
    assert wrong_ports([(6379, 6379), (7777, 7777)], settings) == ["7777: the default of no port setting"]


def test_a_changed_default_makes_the_drawn_port_stale(settings):
    settings["ray_ports"]["gcs"] = 7000
    assert wrong_ports([(6379, 6379)], settings) == ["6379: the default of no port setting"]
    assert "7000" in missing_ports([(6379, 6379)], settings)


def test_a_range_is_a_settings_range_or_default_ports_only(settings):
    assert wrong_ports([(10002, 10999), (6380, 6383)], settings) == []
    assert wrong_ports([(6379, 6390)], settings) == ["6379-6390: neither a setting's range nor default ports only"]


def test_a_port_opened_to_members_and_not_drawn_is_named(settings):
    drawn = [p for p in member_opened(settings) if p != (9100, 9100)]
    assert missing_ports(drawn, settings) == ["9100"]


def test_ip_addresses_and_words_with_digits_are_not_ports():
    assert drawn_ports('a["127.0.0.1:8265"] -- "ssh -L" --> b["v2 10.0.0.7"]') == [(8265, 8265)]
