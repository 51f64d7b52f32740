"""pyinfra's configuration for rayrig's deploys.

pyinfra executes ``config.py`` from the folder it runs in before it loads the
inventory or a deploy file, which is why this file sits at the repository root
(``pyinfra inventories/prod.py deploy/cluster.py`` and ``rayrig deploy`` run from
there). It pins the pyinfra versions rayrig's operations and facts are written
against, so an incompatible pyinfra stops before it touches a host. Settings are
written on ``pyinfra.config`` (a bare ``SUDO = True`` here is ignored by pyinfra 3);
everything else rayrig tunes is inventory data (``inventories/group_data/all.py``).
"""

from pyinfra import config

config.REQUIRE_PYINFRA_VERSION = ">=3.10,<4"
