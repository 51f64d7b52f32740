"""What every data key means, one paragraph each: the ``description`` of its property in the schema
(:mod:`deploy.contract.data_keys` attaches them, as Ray's ``ray-schema.json`` carries one per property).

The reference page of the settings (docs/reference/settings.md) is generated from these, the schema and the
defaults of ``inventories/group_data/all.py`` by ``scripts/docs_reference.py``.
"""

from __future__ import annotations

# fmt: off
DESCRIPTIONS: dict[str, str] = {
    # --- Ray ---
    "ray_role": 'The host\'s part in the cluster: `"head"` runs the GCS, the dashboard and the Ray client server; '
        '`"worker"` joins the head. Exactly one host of the inventory is the head.',
    "ray_num_gpus": "GPUs Ray may schedule on this host (`ray start --num-gpus`). `\"auto\"` declares the GPUs the "
        "deploy detects; an integer declares that many.",
    "ray_num_cpus": "CPUs Ray may schedule on this host (`ray start --num-cpus`). `\"auto\"` lets Ray count them.",
    "ray_resources": "Custom resources of this node (`ray start --resources`), name to a whole amount, e.g. "
        "`{\"nvme\": 1}`. Ray's own (CPU, GPU, memory, object_store_memory) are refused: use their own settings.",
    "ray_object_store_bytes": "The object store's size in bytes (`--object-store-memory`); None lets Ray size it "
        "(30% of the host's memory).",
    "ray_node_ip": "The address this node advertises and the other nodes dial (`--node-ip-address`); also the "
        "address the firewall knows it by. None: the inventory's SSH address, else the host's name.",
    "ray_version": "The Ray version every container must run; the same on every host. `ray_image`'s default is "
        "built from it, and the images rayrig builds pin it.",
    "ray_image": "The image of the ray-node container. Pin a tag or a digest (`REPOSITORY:TAG@sha256:...`: pulled "
        "by the digest and run as `REPOSITORY:rayrig-<12 hex digits of it>`): a new value replaces every node, "
        "head first, then the workers `ray_rolling_batch` at a time.",
    "ray_image_pull": '`"missing"` pulls `ray_image` when the host does not have it; `"always"` pulls on every '
        "deploy, and a pull that brings a new image replaces the container.",
    "ray_image_pull_timeout_s": "Seconds the background pull of `ray_image` may take; the deploy waits for it "
        "right before ray-node and fails the host, with the registry's message, past this.",
    "image_mirror": '`"head"`: the head runs a registry and copies `ray_image` (and the exporters\' images) into '
        "it once, and every host pulls from there over the cluster's network. `\"off\"`: each host pulls from "
        "upstream. The head must be a Debian or Ubuntu host.",
    "image_mirror_port": "TCP port of the head's image mirror (plain HTTP); only the cluster's members reach it.",
    "ray_container_name": "The name of the container running Ray, and of the systemd unit that supervises it.",
    "ray_container_hardened": "The ray-node container runs with `--security-opt no-new-privileges` and, of Docker's "
    "default capabilities, only those Ray and its jobs use (CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID, "
    "SETUID); `False`: Docker's defaults, for an image whose jobs call `sudo` or other setuid programs.",
    "ray_shm_size": "The ray-node container's shared memory (`--shm-size`), e.g. `\"16g\"`; `\"auto\"`: 30% of the "
        "host's memory.",
    "ray_ulimit_nofile": "The open-files limit inside ray-node (Ray advises 65536), capped at the host's hard "
        "limit; None keeps the image's default.",
    "ray_dashboard_host": "The address the head's dashboard (and job API) binds to. On loopback, the default, it "
        "is reached through an SSH tunnel (`rayrig dashboard`); on any other address the firewall admits it "
        "from the admins and the members.",
    "ray_ports": "Every port Ray listens on, pinned so that the firewall and the EC2 security group can be exact. "
        "A host may set only some of them; the others keep their defaults. See the ports reference.",
    "ray_env": "Environment variables of the ray-node container, e.g. `{\"NCCL_SOCKET_IFNAME\": \"eth0\"}`. Shown "
        "in pyinfra's output: put secrets in `ray_env_secret`. No `RAY_AUTH_*`, TLS or metrics-port variable: "
        "their own settings set them.",
    "ray_env_secret": "Secret environment variables of ray-node, e.g. `{\"WANDB_API_KEY\": ...}`: written to a "
        "0600 env file on the host and never printed.",
    "ray_temp_dir": "A private host folder (0700, root's) whose `tmp/` is `/tmp/ray` in ray-node: Ray's sessions, "
        "logs and spilled objects. A folder of Ray's own: not under a system folder, `/tmp`, Docker's data or a "
        "shared mount.",
    "ray_head_wait_s": "How long the deploy waits for the head's GCS port to answer before the workers join.",
    "ray_replace_timeout_s": "Seconds a replaced node has to join the cluster; past this its new container is "
        "removed, the previous one starts again, and the deploy fails that host with Ray's message.",
    "ray_state": '`"absent"`: drain this host\'s Ray node and remove what rayrig put there; it leaves the '
        "cluster's members. Not for the head.",
    "ray_drain_timeout_s": "Seconds an absent host's node has to finish its work before it is removed anyway.",
    "ray_rolling_batch": "How many workers a rolling replacement replaces at once: a number, or a percentage of "
        'the workers such as `"25%"` (rounded down, at least 1). The head goes first, alone.',
    "ray_gcs_fault_tolerance": "Keep the GCS's state in a RocksDB store on the head, so that workers and actors "
        "outlive a restart of the head.",
    "ray_gcs_storage_path": "The head's folder of that RocksDB store (with `ray_gcs_fault_tolerance`): root's, 0700; "
        "the store is its `store/` folder, owned by the container's user and mounted here in the head's container.",
    "ray_efa": "An EFA host: ray-node gets `/dev/infiniband`, unlimited locked memory and `FI_PROVIDER=efa`. "
        "Set by the EC2 inventory for instances with EFA interfaces.",
    "ray_efa_device_rdma": "With `ray_efa`: `FI_EFA_USE_DEVICE_RDMA=1`, for EFA's RDMA reads (p4d, p5).",
    "ray_cluster_name": "The cluster's name: its token, CA and digest key in `.rayrig/clusters/<name>/`, and the "
        "name of its checks reports.",
    "ray_auth": '`"token"`: Ray\'s token authentication, one token per cluster, kept on this machine and mounted '
        'read-only into every ray-node. `"none"`: anyone who reaches Ray\'s ports may use the cluster.',
    "ray_auth_allow_none": 'The consent `ray_auth = "none"` needs: without a token, anyone who reaches a Ray port '
        "or the dashboard runs code on every node (Ray's Jobs API). Even with it, a `ray_dashboard_host` off "
        "loopback is refused, and every deploy warns.",
    "ray_auth_token_file": "The operator's copy of the cluster's token; None: "
        "`.rayrig/clusters/<ray_cluster_name>/ray_auth_token`.",
    "ray_tls": '`"on"`: mutual TLS on every Ray gRPC channel (GCS, raylets, objects, workers, Ray Client), with '
        "one CA per cluster whose key never leaves this machine and a certificate per node. Covers Ray's gRPC, "
        'not the dashboard\'s or the metrics\' HTTP. `"off"`: none.',
    "ray_tls_renew_days": "A deploy reissues a node certificate that expires within this many days.",
    "ray_tls_validity_days": "How long node and client certificates last; more than `ray_tls_renew_days`.",
    "ray_tls_ca_validity_days": "How long the cluster's CA lasts; more than `ray_tls_validity_days`. A new CA: "
        "`rayrig tls rotate INVENTORY`.",
    # --- Docker ---
    "docker_source": 'Where the engine comes from: `"distro"`, the distribution\'s packages, or `"docker"`, '
        "Docker's repository (RHEL 9 and its rebuilds always use it).",
    "docker_repo_url": "Docker's package repository, or a mirror of it (with `docker_source = \"docker\"`).",
    "docker_ce_version": "The Docker CE version installed from Docker's repository (`docker-ce` and `docker-ce-cli`; "
        "with `docker_source = \"docker\"`, and on RHEL 9 and its rebuilds, which ship no Docker). A host at another "
        "version is moved to this one, which restarts Docker and so every container on it.",
    "docker_registry_mirrors": "Registry mirrors written to `/etc/docker/daemon.json` (`registry-mirrors`).",
    "docker_insecure_registries": "Registries reached over plain HTTP (`insecure-registries`), e.g. "
        "`[\"10.0.0.5:5000\"]`; the image mirror adds its own.",
    "docker_log_opts": "The json-file log driver's rotation options in `daemon.json`.",
    "docker_daemon_options": "More `daemon.json` keys, merged over what is there: keys other tools wrote (the "
        "NVIDIA runtime) are kept.",
    "docker_registry_auth": "A login to pull `ray_image` (and the exporters' images) from a private registry: "
        "registry, username, password. Written to a 0600 Docker config of rayrig's own, never printed.",
    # --- Firewall ---
    "firewall_enabled": "Manage the host's inbound firewall: an nftables table of rayrig's own that admits "
        "Ray's ports from the cluster's members only. False removes it; then open `ray_ports` yourself.",
    "firewall_members_all_ports": "The members reach every port of each other (torch.distributed's gloo and "
        "NCCL listen on ports no one can pin); False: Ray's ports and the exporters' only.",
    "firewall_admin_cidrs": "Who may SSH in, and reach a dashboard bound beyond loopback. Empty: SSH from "
        "anywhere. The address the deploy connects from is always admitted.",
    "firewall_allow_ssh_from_anywhere": "Must be True to list an admin network wider than /8 (IPv6: /16) in "
        "`firewall_admin_cidrs`.",
    "firewall_member_cidrs": "This host's other NICs (InfiniBand, RoCE): addresses or networks that every host "
        "admits as members, for NCCL and gloo traffic that leaves through them.",
    "firewall_extra_tcp_ports": "More TCP ports open to any source: integers or `\"first-last\"` ranges, none "
        "of Ray's or the exporters'.",
    # --- NVIDIA ---
    "nvidia_driver": '`"preinstalled"`: a GPU host without a working driver stops the deploy; `"install"`: '
        "rayrig installs the driver branch `nvidia_driver_branch`. Only hosts with NVIDIA GPUs on the PCI bus "
        "get any NVIDIA step.",
    "nvidia_driver_branch": 'The driver branch `nvidia_driver = "install"` installs (Ubuntu: its `-server` '
        "flavour).",
    "nvidia_allow_reboot": "Reboot a host after installing its driver and wait for it to come back; False: stop "
        "and say that it needs a reboot.",
    "nvidia_reboot_timeout_s": "How long to wait for a host to come back after that reboot.",
    "nvidia_toolkit_version": "The NVIDIA Container Toolkit version, pinned on every GPU host.",
    "nvidia_toolkit_repo_url": "The Container Toolkit's package repository, or a mirror of it.",
    "nvidia_cuda_repo_url": "NVIDIA's CUDA package repository, or a mirror of it.",
    "nvidia_visible_devices": 'The GPUs the ray-node container gets: `"all"` or a list of indices such as '
        "`[0, 1]`.",
    # --- Shared storage ---
    "storage_nfs_server": "The inventory host that serves `storage_nfs_exports` over NFS; None: no NFS server "
        "role. Only the cluster's members reach its NFS port.",
    "storage_nfs_exports": "The NFS server's exports, e.g. `[{\"path\": \"/srv/shared\", \"options\": "
        "\"rw,sync,no_subtree_check,root_squash\"}]`. A system folder, or `no_root_squash`/`insecure` in its "
        "options, also needs `\"allow_unsafe\": True` on that export.",
    "storage_nfs_mounts": "NFS mounts on every host, and inside ray-node at the same path, e.g. `[{\"server\": "
        "\"10.0.0.5\", \"export\": \"/srv/shared\", \"path\": \"/mnt/shared\"}]`; mounted now and at boot.",
    "storage_s3_mounts": "S3 buckets mounted on every host and inside ray-node, e.g. `[{\"bucket\": \"datasets\", "
        "\"path\": \"/mnt/datasets\", \"read_only\": True}]`, with s3fs or Mountpoint for Amazon S3 (`driver`); "
        "`endpoint_url` for an S3-compatible store.",
    "storage_shared_dir": "The folder jobs keep their results in, given to them as `RAYRIG_SHARED_DIR` in "
        "ray-node: a shared mount point or a folder under one, never a read-only one. None: the first writable "
        "shared mount (NFS first, as listed); with no shared mount, no `RAYRIG_SHARED_DIR`.",
    "storage_s3_credentials": "The S3 mounts' access key (`access_key_id`, `secret_access_key`), in a 0600 file; "
        "None: the EC2 instance profile.",
    "storage_mountpoint_version": "The Mountpoint for Amazon S3 version installed where a mount uses it, if it "
        "is absent.",
    "storage_mountpoint_url": "Where Mountpoint's package comes from, or a mirror of it; `{version}`, `{arch}` "
        "and `{ext}` are filled in.",
    "storage_mountpoint_sha256": "The sha256 of Mountpoint's packages by `\"x86_64.deb\"`, `\"x86_64.rpm\"`, "
        "`\"arm64.deb\"`, `\"arm64.rpm\"`: a package is checked against it before it is installed.",
    # --- Base ---
    "base_extra_packages": "More OS packages to install on every host, in the base step's package transaction.",
    "base_wait_timeout_s": "How long to wait for cloud-init and the package manager's locks on a fresh host.",
    # --- Monitoring ---
    "monitoring_enabled": "The node and GPU exporters on every host, and Prometheus and Grafana on "
        "`monitoring_host`; False removes what rayrig installed.",
    "monitoring_host": "The inventory name or address of the host that runs Prometheus and Grafana; None: the "
        "head.",
    "monitoring_ports": "The exporters' ports: the node exporter on every host, the GPU exporter on GPU hosts. "
        "They listen on the node's address and only the cluster's members reach them.",
    "monitoring_node_exporter_image": "The node exporter's image, for Amazon Linux 2023, which has no package "
        "of it; pulled through the image mirror when it is on.",
    "monitoring_gpu_exporter": 'The GPU hosts\' exporter: `"dcgm"`, NVIDIA\'s DCGM exporter in a container, or '
        '`"none"`.',
    "monitoring_gpu_exporter_image": "The DCGM exporter's image; pulled through the image mirror when it is on.",
    "monitoring_prometheus_port": "Prometheus's port on the monitoring host's loopback; `rayrig dashboard` "
        "forwards it.",
    "monitoring_grafana_port": "Grafana's port on the monitoring host's loopback; `rayrig dashboard` forwards it.",
    "monitoring_prometheus_image": "Prometheus's image (3.5, an LTS line); pin a tag or a digest.",
    "monitoring_grafana": "Run Grafana beside Prometheus; False: Prometheus only.",
    "monitoring_grafana_image": "Grafana OSS's image; pin a tag or a digest.",
    "monitoring_retention_time": "How long Prometheus keeps samples (`--storage.tsdb.retention.time`).",
    "monitoring_retention_size": "At most this much of Prometheus's data on disk, the oldest dropped first; "
        "None: no size limit.",
    # --- Health gate ---
    "health_gate": "A service on the monitoring host that judges every node each `health_interval_s` and takes a "
        "sick worker out of the cluster by itself (drained, kept out across restarts and reboots), then lets it back "
        "in once it is well. Needs `monitoring_enabled`. False removes everything of it from every host.",
    "health_interval_s": "Seconds between the gate's rounds: each node judged from Ray, Prometheus and its host.",
    "health_probe_interval_s": "Seconds between the functional probes: a short matmul on every node (each GPU, or "
        "the CPU), as a Ray task pinned to the node.",
    "health_probe_deadline_s": "Seconds a probe has to come back; one that does not fails its node.",
    "health_probe_work": "The probe's size: this many 256x256 float32 matrix products on the CPU, or ten times as "
        "many 1024x1024 products on each GPU.",
    "health_probe_fraction": "A node whose probe is slower than this fraction of its peers' median speed fails.",
    "health_min_free_fraction": "A node with less than this fraction free on Ray's temp folder or on Docker's data "
        "root fails.",
    "health_fail_after": "Consecutive failed rounds that quarantine a worker; the head is reported, never "
        "quarantined.",
    "health_pass_after": "Consecutive passed rechecks, outside the cluster, that let a quarantined worker back in.",
    "health_drain_timeout_s": "Seconds a quarantined node's running tasks have to finish before its ray-node is "
        "stopped anyway.",
    "health_max_quarantined": "The most workers out at once: a number, or a percentage of the workers (at least "
        "1). Past it the gate reports instead of acting.",
    "health_metrics_port": "The gate's Prometheus metrics, on the monitoring host's loopback (job `rayrig-health`).",
    # --- Post-deploy checks ---
    "checks_enabled": "Run the checks (preflight, cluster state, storage, benchmark) at the end of the deploy; "
        "the head's value counts. `rayrig check` runs them regardless.",
    "checks_mode": '`"auto"`: the full checks, benchmark included, only after a ray-node was created or '
        'replaced, else the quick checks; `"full"` or `"quick"` always.',
    "checks_profile": 'The benchmark\'s size: `"full"`, or `"quick"` (fewer iterations, all-reduce sizes capped '
        "lower).",
    "checks_matmul_min_fraction": "FAIL a GPU whose bf16 matmul TFLOPS is below this fraction of its datasheet's.",
    "checks_membw_min_fraction": "FAIL a GPU whose copy bandwidth is below this fraction of its datasheet's.",
    "checks_outlier_fraction": "FAIL a GPU or node below this fraction of its peers' median.",
    "checks_timeout_s": "The budget of the whole checks run (preflight, cluster state, storage, benchmark): it "
        "ends with a verdict by then, however slow a node is.",
    "checks_peer_timeout_factor": "A node still measuring when the median node has finished this many times "
        "over is stopped and reported.",
    "checks_node_timeout_s": "The longest one node's measurement may take, with or without peers to judge by.",
    "checks_report_dir": "Where the JSON report and the bandwidth plot are saved on the operator's machine.",
    "checks_monitoring": "The full checks read Prometheus, when monitoring is on: every target up, and no XID, "
        "throttling or ECC errors.",
    "checks_monitoring_window_s": "How far back the checks look in Prometheus for XID, throttling and ECC errors.",
}

#: What listens on each port of ``ray_ports``, and where.
RAY_PORTS: dict[str, str] = {
    "gcs": "The GCS server on the head (`ray start --port`); workers join on it.",
    "client_server": "The Ray client server on the head (`ray://HEAD:10001`).",
    "dashboard": "The dashboard and the job API on the head.",
    "dashboard_agent_grpc": "The dashboard agent's gRPC, on every node.",
    "dashboard_agent_http": "The dashboard agent's HTTP, on every node.",
    "node_manager": "The raylet, on every node.",
    "object_manager": "Object transfer between nodes, on every node.",
    "runtime_env_agent": "The runtime environment agent, on every node.",
    "metrics_export": "Ray's Prometheus metrics, on every node.",
    "worker_min": "The first port of the workers' range, on every node.",
    "worker_max": "The last port of the workers' range, on every node.",
    "dashboard_metrics": "The dashboard's Prometheus metrics, on the head (Ray's `DASHBOARD_METRIC_PORT`).",
    "autoscaler_metrics": "The autoscaler's Prometheus metrics, on the head (Ray's `AUTOSCALER_METRIC_PORT`).",
}

#: What listens on each port of ``monitoring_ports``, and where.
MONITORING_PORTS: dict[str, str] = {
    "node_exporter": "Prometheus's node exporter, on every host.",
    "gpu_exporter": "NVIDIA's DCGM exporter, on GPU hosts.",
}
# fmt: on
