"""The hosts of an EC2 cluster that ``rayrig cloud up`` made, found by their tags.

    pyinfra inventories/ec2.py deploy/cluster.py                  # the current cluster
    RAYRIG_CLUSTER=sprint42 pyinfra inventories/ec2.py deploy/cluster.py

The cluster is ``RAYRIG_CLUSTER``, else the one the last ``rayrig cloud up``
on this machine brought up (``<state>/ec2/current``); the region is
``RAYRIG_REGION``, else the one ``up`` recorded, else boto3's. Only running
instances tagged ``rayrig:cluster=NAME`` count: ``heads`` holds the one with
``rayrig:role=head``, ``workers`` the others. Each host's data (see
``cloud.ec2.cluster_hosts``): ``ssh_user`` from the AMI's family, ``ssh_key``
from the spec, ``ray_role``, ``ray_num_gpus`` from the instance type,
``ray_node_ip`` (the private address; the hosts talk to each other inside the
VPC), ``ssh_config_file`` with a ProxyJump when the spec names a bastion, and
the spec's ``host_data``, read from the spec file (the state keeps none of its
secrets). The defaults in ``group_data/all.py`` apply as usual.
"""

from pyinfra.api.exceptions import PyinfraError as _PyinfraError

from cloud.ec2 import CloudError as _CloudError
from cloud.ec2 import SpecError as _SpecError
from cloud.ec2 import cluster_hosts as _cluster_hosts

try:
    heads, workers = _cluster_hosts()
except (_CloudError, _SpecError) as _error:
    raise _PyinfraError(f"inventories/ec2.py: {_error}") from None
