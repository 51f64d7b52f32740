"""A step's files (Jinja2 templates, scripts) sit in the step's own folder, found as package resources.

``resource(__package__, "ray-node.service.j2")`` is the path of one; ``put_template`` writes a template
with pyinfra's ``files.template``; ``render`` gives the same text (through the same pyinfra loader), for
the pure helpers that unit tests and the plan tests' fake hosts call.
"""

from __future__ import annotations

from importlib.resources import files as package_files
from typing import Any

from pyinfra.api.util import get_template
from pyinfra.operations import files


def resource(package: str, name: str) -> str:
    """The path of ``name``, a file shipped beside the modules of ``package`` (a step's ``__package__``)."""
    return str(package_files(package) / name)


def render(template: str, **values: Any) -> str:
    """The text of the template at ``template`` (a :func:`resource`) rendered with ``values``, as
    ``files.template`` renders it."""
    return get_template(template).render(values)


def put_template(name: str, template: str, dest: str, mode: str = "644", **values: Any) -> Any:
    """``files.template`` of one of rayrig's templates (``name``: the operation's name).

    unit = put_template("Install the unit", UNIT_TEMPLATE, UNIT_PATH, container="ray-node", mounts=[])
    """
    return files.template(name=name, src=template, dest=dest, mode=mode, **values)
