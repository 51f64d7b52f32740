"""What rayrig builds: the Docker images, their build contexts and the code that builds them.

Each folder here is one image's build context (its ``Dockerfile`` and the files
it copies): ``ray/`` is the image every Ray node runs, ``project/`` a
project's requirements on top of it, ``lab-base/``, ``lab-registry/`` and
``lab-prometheus/`` are the local lab's host, registry and Prometheus. The modules build them:
:mod:`images.wheelhouse` (wheels for offline builds), :mod:`images.build`
(``docker build`` and ``docker push``), :mod:`images.project_layer` (the
project's layer) and :mod:`images.stream` (running those commands with
compact progress).

The Ray version is the data contract's default (``ray_version`` in
``inventories/group_data/all.py``), so that the image rayrig builds is the one
the deploy expects.
"""

from __future__ import annotations

from pathlib import Path

from deploy.contract.settings import defaults

#: The Ray version images are built with: ``ray_version``'s default in ``inventories/group_data/all.py``.
RAY_VERSION: str = defaults()["ray_version"]


def context_dir(name: str) -> Path:
    """Return the build context folder of image ``name`` (``ray``, ``project``, ``lab-base``, ``lab-registry``)."""
    folder = Path(__file__).resolve().parent / name
    if not (folder / "Dockerfile").is_file():
        raise FileNotFoundError(f"no Dockerfile in {folder}: expected an image folder such as images/ray")
    return folder
