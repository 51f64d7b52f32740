"""Bring every host of the inventory to a running Ray node, and take out the hosts marked absent.

    pyinfra inventories/prod.py deploy/cluster.py

The inventory is validated first, for all hosts at once: a problem anywhere
stops the deploy before any operation runs on any host. So does a run limited
to some hosts (--limit) that would change the cluster's members behind the
others' backs, and a local Ray token that is not the cluster's; a missing one
is fetched from the head (``deploy/cluster_token.py``).
"""

from pyinfra import host, inventory

from deploy.absent import remove_from_cluster
from deploy.base import base
from deploy.cluster_token import settle_token_once
from deploy.docker import distro_packages as docker_packages
from deploy.docker import docker
from deploy.firewall import distro_packages as firewall_packages
from deploy.firewall import firewall
from deploy.membership import check_membership, record_members
from deploy.monitoring_exporters import monitoring_exporters
from deploy.monitoring_server import monitoring_server
from deploy.nvidia import nvidia
from deploy.post_checks import post_deploy_checks
from deploy.ray_image import ray_image, wait_for_image
from deploy.ray_node import ray_node
from deploy.secret_files import private_uploads
from deploy.settings import is_absent
from deploy.storage import storage
from deploy.timings import start_phase_clock
from deploy.validate import validate_once

validate_once(host.state, inventory)
start_phase_clock(host.state)
check_membership(host.state, inventory)
settle_token_once(host.state, inventory)

if is_absent(host):
    remove_from_cluster()  # drained first, while the others still admit it
else:
    private_uploads()
    base(ahead=(*docker_packages(), *firewall_packages()))
    docker()
    ray_image()
    nvidia()
    storage()
    firewall()
    wait_for_image()
    ray_node()
    record_members()
    monitoring_exporters()
monitoring_server()  # Prometheus and Grafana on the monitoring host, once Ray is up; removed elsewhere
post_deploy_checks()
