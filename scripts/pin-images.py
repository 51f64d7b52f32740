"""Check, and update, the digests that pin the default images in inventories/group_data/all.py.

Each default image pinned as ``REPOSITORY:TAG@sha256:...`` is looked up in its registry by its tag
with ``skopeo inspect --raw`` (the manifest, or the multi-platform index, exactly as the registry
serves it), and its digest is the SHA-256 of those bytes: the digest Docker pulls by.

    python scripts/pin-images.py            # say, for each pinned image, whether its tag still names it
    python scripts/pin-images.py --update   # write the tags' current digests into all.py

Exit status: 0 when every digest matches (or was updated), 1 when one differs and was not updated,
2 when a registry could not be asked. Needs skopeo (Debian: ``apt-get install skopeo``) and the
registries on the network; a private registry's login comes from skopeo's usual auth file.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

ALL_PY = Path(__file__).resolve().parent.parent / "inventories" / "group_data" / "all.py"
#: A pinned image in all.py: the quoted reference, its tag part and its digest.
PINNED = re.compile(r'"(?P<name>[A-Za-z0-9][A-Za-z0-9._:/+-]*:[A-Za-z0-9._-]+)@(?P<digest>sha256:[0-9a-f]{64})"')


def pinned_images(text: str) -> list[tuple[str, str]]:
    """(REPOSITORY:TAG, digest) of every image pinned in ``text``, in order.

    >>> pinned_images('x = "quay.io/a/b:v1@sha256:' + "0" * 64 + '"  # c')
    [('quay.io/a/b:v1', 'sha256:0000000000000000000000000000000000000000000000000000000000000000')]
    """
    return [(m["name"], m["digest"]) for m in PINNED.finditer(text)]


def manifest_digest(raw: bytes) -> str:
    """The digest of a manifest as the registry served it: what ``docker pull NAME@DIGEST`` asks for."""
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def current_digest(name: str, timeout_s: float = 120) -> str:
    """The digest ``name``'s tag names now in its registry (skopeo inspect --raw); RuntimeError if unknown."""
    result = subprocess.run(
        ["skopeo", "inspect", "--raw", f"docker://{name}"], capture_output=True, timeout=timeout_s, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"{name}: skopeo inspect failed: {result.stderr.decode(errors='replace').strip()}")
    return manifest_digest(result.stdout)


def updated(text: str, name: str, old: str, new: str) -> str:
    """``text`` with ``name``'s digest ``old`` replaced by ``new``."""
    return text.replace(f'"{name}@{old}"', f'"{name}@{new}"')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="write the tags' current digests into all.py")
    args = parser.parse_args(argv)
    if shutil.which("skopeo") is None:
        print("pin-images: skopeo is not installed (Debian: apt-get install skopeo)", file=sys.stderr)
        return 2
    text = ALL_PY.read_text()
    status = 0
    for name, digest in pinned_images(text):
        try:
            now = current_digest(name)
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            print(f"?  {error}", file=sys.stderr)
            status = 2
            continue
        if now == digest:
            print(f"ok {name}@{digest}")
        elif args.update:
            text = updated(text, name, digest, now)
            print(f"-> {name}: {digest} replaced by {now}")
        else:
            print(f"!= {name}: all.py pins {digest}, the tag names {now} (--update writes it)")
            status = max(status, 1)
    if args.update:
        ALL_PY.write_text(text)
    return status


if __name__ == "__main__":
    sys.exit(main())
