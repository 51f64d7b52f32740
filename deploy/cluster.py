"""Bring every host of the inventory to a running Ray node, and take out the hosts marked absent.

    pyinfra inventories/prod.py deploy/cluster.py

The inventory is validated first, for all hosts at once: a problem anywhere
stops the deploy before any operation runs on any host. So does a run limited
to some hosts (--limit) that would change the cluster's members behind the
others' backs, and a local Ray token that is not the cluster's; a missing one
is fetched from the head (``deploy/ray/cluster_token.py``).
"""

from pyinfra import host, inventory

from deploy.contract.settings import is_absent
from deploy.firewall.nftables import distro_packages as firewall_packages
from deploy.firewall.nftables import firewall
from deploy.host.base import base
from deploy.host.docker import distro_packages as docker_packages
from deploy.host.docker import docker
from deploy.host.image_mirror import hold_until_configured, mirror_service
from deploy.host.nvidia import nvidia
from deploy.host.ray_image import ray_image, wait_for_image
from deploy.host.secret_files import digest_key, private_uploads
from deploy.monitoring.exporters import monitoring_exporters
from deploy.monitoring.health import health_gate_service, health_node_side
from deploy.monitoring.server import monitoring_server
from deploy.post_checks import post_deploy_checks
from deploy.ray.absent import remove_from_cluster
from deploy.ray.cluster_token import settle_token_once
from deploy.ray.membership import check_membership, record_members
from deploy.ray.ray_node import ray_node
from deploy.run import pyinfra_costs
from deploy.run.interrupt import exit_130_on_interrupt
from deploy.run.timings import start_phase_clock
from deploy.run.validate import validate_once
from deploy.storage.mounts import storage

exit_130_on_interrupt()  # pyinfra's CLI exits 0 on Ctrl-C: a cut deploy must not read as done
pyinfra_costs.install()  # pyinfra's operation order, read off the frames: the same, faster
validate_once(host.state, inventory)
start_phase_clock(host.state)
check_membership(host.state, inventory)
settle_token_once(host.state, inventory)

if is_absent(host):
    remove_from_cluster()  # drained first, while the others still admit it
    health_node_side()  # the health gate's part of it too
else:
    private_uploads()
    hold_until_configured()  # the image mirror's package would start its registry as it ships it
    base(ahead=(*docker_packages(), *firewall_packages()))
    digest_key()  # before any secret file: they are compared by it
    docker()
    ray_image()
    nvidia()
    storage()
    firewall()
    mirror_service()  # the head's image mirror answers only behind the firewall
    wait_for_image()
    health_node_side()  # before ray-node: a quarantined node stays stopped
    ray_node()
    record_members()
    monitoring_exporters()
monitoring_server()  # Prometheus and Grafana on the monitoring host, once Ray is up; removed elsewhere
health_gate_service()  # the health gate on the monitoring host (health_gate); removed elsewhere
post_deploy_checks()
