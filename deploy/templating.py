"""Config files as Jinja2 templates in ``deploy/templates``, next to the steps that write them.

``put_template`` writes one with pyinfra's ``files.template``; ``render`` gives the
same text (through the same pyinfra loader), for the pure helpers that unit tests
and the plan tests' fake hosts call.
"""

from __future__ import annotations

from importlib.resources import files as package_files
from typing import Any

from pyinfra.api.util import get_template
from pyinfra.operations import files


def template_path(template: str) -> str:
    """The path of a template shipped in the ``deploy`` package, e.g. ``"ray-node.service.j2"``."""
    return str(package_files("deploy") / "templates" / template)


def render(template: str, **values: Any) -> str:
    """The text of ``template`` rendered with ``values``, as ``files.template`` renders it."""
    return get_template(template_path(template)).render(values)


def put_template(name: str, template: str, dest: str, mode: str = "644", **values: Any) -> Any:
    """``files.template`` of one of rayrig's templates (``name``: the operation's name).

    unit = put_template("Install the unit", "ray-node.service.j2", UNIT_PATH, container="ray-node", mounts=[])
    """
    return files.template(name=name, src=template_path(template), dest=dest, mode=mode, **values)
