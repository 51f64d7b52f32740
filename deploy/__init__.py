"""The deploy: pyinfra operations that bring hosts to a running Ray cluster, folder by concern.

- ``cluster.py``, ``check.py``: the pyinfra entry files (``pyinfra INVENTORY deploy/cluster.py``);
  ``post_checks.py``: the deploy's last step, the post-deploy checks;
- :mod:`deploy.contract`: the data contract (settings, the schema of every data key, ports, paths),
  pure Python without pyinfra, shared with the operator's commands;
- :mod:`deploy.run`: plumbing of one pyinfra run (memo, facts, templates, units, timings, rolling);
- :mod:`deploy.host`: a host made ready (base packages, Docker, the Ray image, NVIDIA, EFA);
- :mod:`deploy.storage`, :mod:`deploy.firewall`, :mod:`deploy.ray`, :mod:`deploy.monitoring`: the
  shared mounts, the nftables table, the ray-node container (token, TLS, membership, leaving),
  the exporters and Prometheus/Grafana.

Each step's templates and scripts sit beside it (:func:`deploy.run.templating.resource`).
"""
