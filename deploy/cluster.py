"""Bring every host of the inventory to a running Ray node.

    pyinfra inventories/prod.py deploy/cluster.py

The inventory is validated first, for all hosts at once: a problem anywhere
stops the deploy before any operation runs on any host. So does a local Ray
token that is not the cluster's; a missing one is fetched from the head
(``deploy/cluster_token.py``).
"""

from pyinfra import host, inventory

from deploy.base import base
from deploy.cluster_token import settle_token_once
from deploy.docker import docker
from deploy.firewall import firewall
from deploy.nvidia import nvidia
from deploy.post_checks import post_deploy_checks
from deploy.ray_image import ray_image
from deploy.ray_node import ray_node
from deploy.secret_files import private_uploads
from deploy.storage import storage
from deploy.validate import validate_once

validate_once(host.state, inventory)
settle_token_once(host.state, inventory)

private_uploads()
base()
docker()
ray_image()
nvidia()
storage()
firewall()
ray_node()
post_deploy_checks()
