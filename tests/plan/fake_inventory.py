"""A fake three-host cluster (a head and two workers, Ubuntu 22.04, fresh; worker-1
has 8 H100 GPUs) to try the deploy without any machine:

    PYINFRA_FAKE_DELAY=0 pyinfra tests/plan/fake_inventory.py deploy/cluster.py -y -vv

``RAYRIG_FAKE_VARIANT`` picks a broken inventory instead, to see how rayrig
reports it (the first three stop before any fact is gathered):

- ``two-heads``: worker-1 also declares ``ray_role = "head"``
- ``negative-gpus``: worker-1 declares ``ray_num_gpus = -1``
- ``typo``: worker-2 sets ``ray_num_gpu`` (missing "s")
- ``gpu-mismatch``: worker-1 declares 4 GPUs but has 8 (found once facts are read,
  still before any operation runs)
- ``fetch-token``: the cluster is deployed already, and this machine has no copy of
  its Ray token (a fresh clone): the deploy fetches it from the head

Run it from the repository root (pyinfra puts the working directory on sys.path).
"""

import os as _os

from deploy.contract import settings as _settings
from deploy.ray import auth as _auth
from tests.plan.fakes.fakehosts import cluster as _cluster
from tests.plan.fakes.fakehosts import cluster_data as _cluster_data

_VARIANTS = {
    "default": {},
    "two-heads": {"@fake/worker-1": {"ray_role": "head"}},
    "negative-gpus": {"@fake/worker-1": {"ray_num_gpus": -1}},
    "typo": {"@fake/worker-2": {"ray_num_gpu": 2}},
    "gpu-mismatch": {"@fake/worker-1": {"ray_num_gpus": 4}},
    "fetch-token": {},
}

_variant = _os.environ.get("RAYRIG_FAKE_VARIANT") or "default"
if _variant not in _VARIANTS:
    raise ValueError(f"RAYRIG_FAKE_VARIANT={_variant!r}: expected one of {', '.join(sorted(_VARIANTS))}")

_hosts = [(name, {**data, **_VARIANTS[_variant].get(name, {})}) for name, data in _cluster_data(workers=2)]

hosts = _cluster("ubuntu22", "converged" if _variant == "fetch-token" else "fresh", _hosts, gpus={"@fake/worker-1": 8})

if _variant == "fetch-token":  # the converged hosts run the token the fakes made here; forget it
    _auth.token_path(_settings.merge(_hosts[0][1])).unlink()
