"""Every rayrig tunable, with its default.

pyinfra loads this file as group data for every host when the inventory lives
in ``inventories/``. rayrig also reads it directly (``deploy.contract.settings``), so the
same defaults apply to an inventory kept anywhere else. Set a key on a host or
in your own group data to override it; ``deploy/contract/schema.py`` validates the
result before any host is touched. Names are prefixed by area.
"""

# --- Ray -------------------------------------------------------------------
ray_role = "worker"  # "head" or "worker"; exactly one host of the cluster is the head
ray_num_gpus = "auto"  # GPUs Ray may schedule on this host: an integer, or "auto" for the detected count
ray_num_cpus = "auto"  # CPUs Ray may schedule on this host: an integer, or "auto" to let Ray count them
ray_resources = {}  # custom resources, name -> whole amount, e.g. {"nvme": 1}; not Ray's own (CPU, GPU, ...)
ray_object_store_bytes = None  # object store size in bytes; None lets Ray size it (30% of memory)
ray_node_ip = None  # address this node advertises and other nodes dial; None: the inventory address
ray_version = "2.60.0"  # the Ray version every container must run (checked against the image)
ray_container_name = "ray-node"  # the container running Ray, supervised by the systemd unit of the same name
ray_shm_size = "auto"  # --shm-size of the ray-node container, e.g. "16g"; "auto": 30% of host memory
ray_container_hardened = True  # ray-node: no-new-privileges, only the capabilities Ray needs; False: Docker's defaults
ray_ulimit_nofile = 65536  # open-files limit in ray-node (Ray's advice); capped at the host's hard limit
ray_dashboard_host = "127.0.0.1"  # dashboard bind address on the head; reach it through an SSH tunnel
ray_ports = {  # every port Ray listens on, pinned so that firewalls and security groups can be exact
    "gcs": 6379,  # GCS server on the head (ray start --port); workers join on it
    "client_server": 10001,  # Ray client server on the head (ray://HEAD:10001)
    "dashboard": 8265,  # dashboard and job API on the head
    "dashboard_agent_grpc": 8266,  # dashboard agent gRPC, every node
    "dashboard_agent_http": 52365,  # dashboard agent HTTP, every node
    "node_manager": 6380,  # raylet, every node
    "object_manager": 6381,  # object transfer between nodes, every node
    "runtime_env_agent": 6382,  # runtime environment agent, every node
    "metrics_export": 6383,  # Prometheus metrics, every node
    "worker_min": 10002,  # first port of the worker range, every node
    "worker_max": 10999,  # last port of the worker range, every node
    "dashboard_metrics": 44227,  # the dashboard's Prometheus metrics, on the head (Ray's DASHBOARD_METRIC_PORT)
    "autoscaler_metrics": 44217,  # the autoscaler's Prometheus metrics, on the head (Ray's AUTOSCALER_METRIC_PORT)
}
ray_env = {}  # environment of the ray-node container, e.g. {"NCCL_SOCKET_IFNAME": "eth0"}; not for secrets
ray_env_secret = {}  # secret environment of ray-node (e.g. {"WANDB_API_KEY": ...}): a 0600 --env-file, never printed
ray_temp_dir = "/var/lib/rayrig/ray"  # private host folder; its tmp/ is /tmp/ray in ray-node (Ray's sessions, logs)
ray_head_wait_s = 120  # how long the deploy waits for the head's GCS port to answer before workers join
ray_replace_timeout_s = 120  # seconds a replaced node has to join the cluster before its previous container comes back
ray_state = "present"  # "absent": drain this host's Ray node and remove what rayrig put there (not the head)
ray_drain_timeout_s = 120  # seconds an absent host's node has to finish its work before it is removed anyway
ray_rolling_batch = "25%"  # workers replaced at once in a rolling change: a number, or a percentage of them
ray_gcs_fault_tolerance = False  # GCS in a RocksDB store on the head: workers and actors outlive a head restart
ray_gcs_storage_path = "/var/lib/rayrig/gcs"  # the head's folder of that store (with ray_gcs_fault_tolerance)
ray_efa = False  # EFA host: ray-node gets /dev/infiniband, memlock unlimited, FI_PROVIDER=efa (set by ec2.py)
ray_efa_device_rdma = False  # with ray_efa: FI_EFA_USE_DEVICE_RDMA=1 (p4d, p5: EFA RDMA reads)
ray_cluster_name = "cluster"  # names the cluster: its token in the state directory, its check reports
ray_auth = "token"  # "token": Ray token authentication (one token per cluster); "none": no authentication
ray_auth_allow_none = False  # True: accept ray_auth = "none" (not with a dashboard off loopback); warns each deploy
ray_auth_token_file = None  # the operator's copy of the token; None: .rayrig/clusters/<ray_cluster_name>/ray_auth_token

# --- Ray image ---------------------------------------------------------------
ray_image = f"rayproject/ray:{ray_version}-py311-gpu"  # image of the ray-node container; pin a tag or a digest
ray_image_pull = "missing"  # "missing": pull when the image is absent; "always": pull on every deploy
ray_image_pull_timeout_s = 3600  # seconds the background pull of ray_image may take before the deploy fails the host
image_mirror = "off"  # "head": the head mirrors ray_image (one pull from upstream per cluster), the hosts pull from it
image_mirror_port = 5000  # TCP port of the head's image mirror (plain HTTP, open to the cluster's members only)

# --- Ray TLS -----------------------------------------------------------------
# Ray TLS between nodes: one CA per cluster (0600 key beside the token, never leaves this machine), a key and
# certificate per node mounted read-only into ray-node; covers Ray's gRPC, not the dashboard's or metrics' HTTP.
ray_tls = "off"  # "on": mutual TLS on every Ray gRPC channel (GCS, raylets, objects, workers, Ray Client); "off": none
ray_tls_renew_days = 30  # a deploy reissues a node certificate that expires within this many days
ray_tls_validity_days = 397  # how long node and client certificates last (must exceed ray_tls_renew_days)
ray_tls_ca_validity_days = 3650  # how long the cluster's CA lasts (a new CA: `rayrig tls rotate INVENTORY`)

# --- Docker ----------------------------------------------------------------
docker_source = "distro"  # where the engine comes from: "distro" packages or Docker's "docker" repository
docker_repo_url = "https://download.docker.com/linux"  # Docker's repository (or a mirror of it)
docker_ce_version = "28.5.2"  # Docker CE from Docker's repository, pinned (docker-ce, docker-ce-cli)
docker_registry_mirrors = []  # registry mirrors written to daemon.json
docker_insecure_registries = []  # registries reached over plain HTTP, e.g. ["10.0.0.5:5000"]
docker_log_opts = {"max-size": "100m", "max-file": "3"}  # json-file log rotation in daemon.json
docker_daemon_options = {}  # further daemon.json keys, merged over what is there (never clobbered)
docker_registry_auth = None  # {"registry": ..., "username": ..., "password": ...} to pull ray_image

# --- Firewall (nftables, in a table of its own) --------------------------------
# Inbound is dropped except: loopback, replies, ICMP, SSH, Ray's ports from the cluster's own members.
firewall_enabled = True  # manage the host's inbound firewall; False: leave it to you (open ray_ports yourself)
firewall_members_all_ports = True  # members reach all of each other's ports (gloo, NCCL); False: Ray's only
firewall_admin_cidrs = []  # who may SSH in (and reach a non-local dashboard); []: SSH from anywhere
firewall_allow_ssh_from_anywhere = False  # must be True to list an admin network wider than /8 (IPv6: /16)
firewall_member_cidrs = []  # this host's other NICs (InfiniBand, RoCE): addresses/networks every host admits
firewall_extra_tcp_ports = []  # more TCP ports open to any source: integers or "first-last" ranges, none of Ray's

# --- NVIDIA ----------------------------------------------------------------
# Only hosts with NVIDIA GPUs (detected on the PCI bus) get any of this; CPU hosts get no NVIDIA step.
nvidia_driver = "preinstalled"  # "preinstalled": stop if a GPU host has no working driver; "install": install one
nvidia_driver_branch = "550"  # driver branch nvidia_driver = "install" installs (Ubuntu: the "-server" flavour)
nvidia_allow_reboot = False  # reboot a host after installing its driver and wait for it; false: stop and say so
nvidia_reboot_timeout_s = 900  # how long to wait for a host to come back after that reboot
nvidia_toolkit_version = "1.17.8"  # NVIDIA Container Toolkit version, pinned on every GPU host
nvidia_toolkit_repo_url = "https://nvidia.github.io/libnvidia-container"  # the toolkit's repository (or a mirror)
nvidia_cuda_repo_url = "https://developer.download.nvidia.com/compute/cuda/repos"  # CUDA repository (or a mirror)
nvidia_visible_devices = "all"  # GPUs the ray-node container gets: "all" or a list of indices, e.g. [0, 1]

# --- Shared storage (mounted on every host and inside ray-node at the same path) -----
storage_nfs_server = None  # the inventory host that serves storage_nfs_exports; None: no NFS server role
# [{"path": "/srv/shared", "options": "rw,sync,no_subtree_check,root_squash"}]; a system folder, or
# no_root_squash/insecure in options, also needs "allow_unsafe": True on that export
storage_nfs_exports = []
storage_nfs_mounts = []  # [{"server": "10.0.0.5" or a host name, "export": "/srv/shared", "path": "/mnt/shared"}]
storage_s3_mounts = []  # [{"bucket": "datasets", "path": "/mnt/datasets", "read_only": True, "endpoint_url": ...}]
storage_shared_dir = None  # results' folder, RAYRIG_SHARED_DIR in ray-node; None: the first writable shared mount
storage_s3_credentials = None  # {"access_key_id": ..., "secret_access_key": ...}; None: the EC2 instance profile
storage_mountpoint_version = "1.24.0"  # Mountpoint for Amazon S3 installed where a mount uses it (if absent)
storage_mountpoint_url = (  # where its package comes from (or a mirror of it); {version}, {arch}, {ext} filled in
    "https://s3.amazonaws.com/mountpoint-s3-release/{version}/{arch}/mount-s3-{version}-{arch}.{ext}"
)
storage_mountpoint_sha256 = {}  # "x86_64.deb"/"x86_64.rpm"/"arm64.deb"/"arm64.rpm" -> sha256: checked before install

# --- Base ------------------------------------------------------------------
base_extra_packages = []  # more OS packages to install on every host
base_wait_timeout_s = 600  # how long to wait for cloud-init and package-manager locks on a fresh host

# --- Monitoring -------------------------------------------------------------
# monitoring (exporters): every exporter listens on the node's address, admitted from the members only.
monitoring_enabled = True  # node and GPU exporters (and Prometheus, Grafana); False removes what rayrig installed
monitoring_host = None  # inventory name or address of the host running Prometheus and Grafana; None: the head
monitoring_ports = {"node_exporter": 9100, "gpu_exporter": 9400}  # node exporter (every host), GPU exporter (GPU hosts)
# The images are pinned by digest (scripts/pin-images.py checks and updates the digests); the DCGM
# exporter's and ray_image stay tags: pin them in your inventory once you have checked the digest.
monitoring_node_exporter_image = (  # Amazon Linux 2023 (no package there)
    "quay.io/prometheus/node-exporter:v1.9.1@sha256:d00a542e409ee618a4edc67da14dd48c5da66726bbd5537ab2af9c1dfc442c8a"
)
monitoring_gpu_exporter = "dcgm"  # GPU hosts' exporter: "dcgm" (NVIDIA's DCGM exporter container) or "none"
monitoring_gpu_exporter_image = "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04"  # through image_mirror too
# monitoring (server): Prometheus and Grafana on monitoring_host, in containers, on 127.0.0.1 only.
monitoring_prometheus_port = 9090  # Prometheus's port on the monitoring host's loopback (rayrig dashboard forwards it)
monitoring_grafana_port = 3000  # Grafana's port on the monitoring host's loopback (rayrig dashboard forwards it)
monitoring_prometheus_image = (  # Prometheus 3.5, an LTS line
    "quay.io/prometheus/prometheus:v3.5.0@sha256:63805ebb8d2b3920190daf1cb14a60871b16fd38bed42b857a3182bc621f4996"
)
monitoring_grafana = True  # run Grafana beside Prometheus; False: Prometheus only
monitoring_grafana_image = (  # Grafana OSS
    "grafana/grafana:12.1.1@sha256:a1701c2180249361737a99a01bc770db39381640e4d631825d38ff4535efa47d"
)
monitoring_retention_time = "15d"  # Prometheus keeps samples this long (--storage.tsdb.retention.time)
monitoring_retention_size = "10GB"  # and at most this much on disk, oldest dropped first; None: no size limit

# --- Health gate (docs/design/health-gate.md) -------------------------------
health_gate = False  # a service on monitoring_host drains a sick worker and keeps it out until it is well again
health_interval_s = 60  # seconds between the gate's rounds: every node judged from Prometheus, Ray and its host
health_probe_interval_s = 300  # seconds between the functional probes (a short matmul on every node, a Ray task)
health_probe_deadline_s = 60  # a probe not back by then fails its node
health_probe_work = 1000  # the probe's size: 256x256 float32 products on the CPU (10x as many 1024x1024 on a GPU)
health_probe_fraction = 0.5  # a node whose probe is slower than this fraction of its peers' median speed fails
health_min_free_fraction = 0.05  # a node with less free space on Ray's temp folder or Docker's data root fails
health_fail_after = 2  # consecutive failed rounds that quarantine a worker (the head is reported, never quarantined)
health_pass_after = 3  # consecutive passed rechecks that let a quarantined worker back in
health_drain_timeout_s = 300  # seconds a quarantined node's running tasks have to finish before it is stopped anyway
health_max_quarantined = "25%"  # the most workers out at once (a number, or a percentage of them, at least 1)
health_metrics_port = 9478  # the gate's Prometheus metrics on the monitoring host's loopback

# --- Post-deploy checks ----------------------------------------------------
checks_enabled = True  # run the checks (preflight, cluster state, benchmark) at the end of the deploy
checks_mode = "auto"  # "auto": full checks only after a ray-node was created or replaced, else quick; "full"; "quick"
checks_profile = "full"  # the benchmark's size: "full" or "quick" (fewer iterations, all-reduce sizes capped lower)
checks_matmul_min_fraction = 0.65  # FAIL a GPU whose bf16 matmul TFLOPS is below this fraction of its spec
checks_membw_min_fraction = 0.80  # FAIL a GPU whose copy bandwidth is below this fraction of its spec
checks_outlier_fraction = 0.9  # FAIL a GPU or node below this fraction of its peers' median
checks_timeout_s = 900  # the budget of the whole checks run (preflight, cluster state, storage, benchmark)
checks_peer_timeout_factor = 3  # a node still running when the median node has finished this many times over is stopped
checks_node_timeout_s = 300  # the longest one node's measurement may take, with or without peers to judge by
checks_report_dir = "reports"  # where the JSON report and the plot are saved on the operator's machine
checks_monitoring = True  # the full checks read Prometheus (targets up; XID, throttling, ECC) when monitoring is on
checks_monitoring_window_s = 3600  # how far back the checks look in Prometheus for XID, throttling and ECC errors
