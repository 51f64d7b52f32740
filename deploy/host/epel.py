"""EPEL on the RHEL 9 family, for the steps that need a package from it (s3fs; the driver's DKMS).

Ensures the ``epel-release`` package, which configures EPEL's repository (``gpgcheck=1``) and
carries its key, is installed verified: on Rocky Linux and AlmaLinux from the distribution's own
``extras`` repository, checked against the distribution's key like any of its packages; on RHEL,
which has no such repository, from Fedora's URL, once EPEL's key is fetched, checked against the
fingerprint pinned in :mod:`deploy.host.repo_keys` and imported into rpm's database, with dnf told
to check the downloaded package's signature against it (``localpkg_gpgcheck``, off by default for a
package given by URL). A host that has it plans nothing. Example::

    ensure_epel("for s3fs")   # before installing s3fs-fuse
"""

from __future__ import annotations

import shlex

from pyinfra.operations import server

from deploy.host import repo_keys
from deploy.host.base import install_packages, missing_packages, platform, will_install

#: EPEL's release package and its key, by RHEL major version.
RELEASE_URL = "https://dl.fedoraproject.org/pub/epel/epel-release-latest-{major}.noarch.rpm"
KEY_URL = "https://dl.fedoraproject.org/pub/epel/RPM-GPG-KEY-EPEL-{major}"


def rhel_install_command(major: str) -> str:
    """dnf's install of EPEL's release package from Fedora's URL, its signature checked.

    >>> rhel_install_command("9")
    'dnf install -y --setopt=localpkg_gpgcheck=1 https://dl.fedoraproject.org/pub/epel/epel-release-latest-9.noarch.rpm'
    """
    return shlex.join(["dnf", "install", "-y", "--setopt=localpkg_gpgcheck=1", RELEASE_URL.format(major=major)])


def ensure_epel(why: str) -> None:
    """EPEL's repository on the current (RHEL-family) host, ``why`` naming the step in the operations."""
    if not missing_packages(["epel-release"]):
        return
    plat = platform()
    if plat.id != "rhel":
        install_packages(["epel-release"], f"Add the EPEL repository ({why})")
        return
    major = plat.version.split(".")[0]
    key = f"epel-{major}"
    repo_keys.ensure_key("EPEL's", KEY_URL.format(major=major), repo_keys.rpm_key_path(key), key, rpm_import=True)
    will_install(["epel-release"])
    server.shell(name=f"Add the EPEL repository ({why})", commands=[rhel_install_command(major)])
