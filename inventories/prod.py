"""Example: an on-prem GPU lab. Copy this file, fill in your hosts, then run

    pyinfra inventories/mylab.py deploy/cluster.py --dry    # what would change
    pyinfra inventories/mylab.py deploy/cluster.py          # bring the cluster up

Each host is (address, data). The group names (``heads``, ``workers``) are for
you and for ``--limit``; what makes a host the head is ``ray_role``. Every key
a host may set, with its default, is in ``inventories/group_data/all.py``.
Hosts need passwordless sudo for ``ssh_user`` (pyinfra 3 cannot type a sudo
password for you).
"""

# Applies to every host below; a host's own data overrides it.
_common = {
    "ssh_user": "ubuntu",  # the account pyinfra logs in as
    "ssh_key": "~/.ssh/id_ed25519",  # its private key
    "_sudo": True,  # operations run through sudo
    "ray_image": "registry.lab.example:5000/ml/ray-torch:2.60.0-cu128",  # built with `rayrig image build --push`
    "docker_registry_mirrors": [],  # e.g. ["https://mirror.lab.example"]
    "ray_cluster_name": "gpu-lab",  # names the cluster's Ray token (.rayrig/clusters/gpu-lab/) and its reports
    "firewall_admin_cidrs": ["192.0.2.0/28"],  # the admins' network: SSH from there (and from the deploy) only
    # Shared storage, at the same path on every host and in every Ray container:
    "storage_nfs_server": "gpu-head.lab.example",  # the head exports /srv/shared to the cluster
    "storage_nfs_exports": [{"path": "/srv/shared"}],
    "storage_nfs_mounts": [{"server": "gpu-head.lab.example", "export": "/srv/shared", "path": "/mnt/shared"}],
    "storage_s3_mounts": [],  # e.g. [{"bucket": "datasets", "path": "/mnt/datasets", "read_only": True,
    #                                  "endpoint_url": "https://minio.lab.example:9000", "path_style": True}]
    "storage_s3_credentials": None,  # {"access_key_id": ..., "secret_access_key": ...}: keep it out of git
}

heads = [
    # The head schedules work and serves the dashboard; give it a few GPUs too if it has them.
    ("gpu-head.lab.example", {**_common, "ray_role": "head", "ray_node_ip": "192.0.2.10", "ray_num_gpus": 0}),
]

workers = [
    # 8 x H100 SXM: declare the count; a mismatch with what the host has stops the deploy.
    ("gpu-01.lab.example", {**_common, "ray_node_ip": "192.0.2.11", "ray_num_gpus": 8}),
    ("gpu-02.lab.example", {**_common, "ray_node_ip": "192.0.2.12", "ray_num_gpus": 8}),
    # An older box with 4 GPUs and a local NVMe scratch disk, advertised as a custom resource.
    ("gpu-03.lab.example", {**_common, "ray_node_ip": "192.0.2.13", "ray_num_gpus": 4, "ray_resources": {"nvme": 1}}),
]
