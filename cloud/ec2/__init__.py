"""EC2 clusters for a sprint: create, inventory, tear down, list and reap (``rayrig cloud``).

``up(spec)`` ensures, idempotently, what a cluster spec (``spec.py``) describes:

1. a VPC with an internet gateway, a route table and a subnet in each zone a
   launch tries (or the VPC and subnet the spec names, which rayrig never tags
   as its own nor deletes);
2. a security group ``rayrig-NAME``: everything within the group (the Ray ports,
   NCCL and EFA included) in and out, SSH (tcp 22) from the admin CIDRs only,
   and outbound internet unless the spec turns it off;
3. the key pair ``rayrig-NAME`` imported from the spec's public key;
4. a cluster placement group ``rayrig-NAME`` for the workers (when asked for);
5. the instance profile: the spec's own (``iam_instance_profile``), or a role
   ``rayrig-NAME`` reading (and writing) exactly the spec's ``s3_buckets``
   (``iam``);
6. the head and the workers: IMDSv2 required, an encrypted gp3 root volume,
   spot or on-demand; on a capacity error, in the next zone, instance type or
   market the spec allows (``failover``); and a timer that terminates each at
   the cluster's expiry (``expiry``; ``extend`` moves the expiry);

then waits until the instances run and SSH answers. Before it creates anything
it says what it will create with an hourly cost estimate (on-demand prices from
the AWS Pricing API, spot prices from the spot price history) and asks
(``--yes`` skips the question). Whatever a run creates is tagged ``rayrig:cluster``,
``rayrig:role``, ``rayrig:owner``, ``rayrig:expires-at`` and
``rayrig:created=true``; a second run finds it by those tags and creates
nothing. A run that fails half way removes what it created and says what failed.
One ``up`` or ``down`` of a cluster runs at a time on this machine (a lock in
the state folder); each instance fills a slot (``rayrig:slot``) and is launched
with a ``ClientToken`` derived from the cluster, its key pair, the group and
the slot, so a retried or concurrent launch gets the same instance back.

``down(NAME)`` says how long the cluster has run and what it has cost, asks,
deletes what carries ``rayrig:created=true`` and the cluster's tag in the
region ``up`` recorded, then lists whatever still carries the tag (1 if
anything does); it forgets the record only when nothing is left there.
``list_clusters`` lists clusters (with their cost so far); ``reap`` takes down
the expired ones (what their instances, which end themselves, leave behind).
``inventories/ec2.py`` turns a cluster's instances into pyinfra hosts
(``cluster_hosts``).

The modules, in the order a run of ``up`` meets them: ``spec`` (the file, with
``spec_schema``, ``spec_zones`` and ``spec_s3``),
``aws`` (clients, errors, tags), ``ami`` (the AMI and instance types),
``rules`` (the security group), ``iam`` (the instance profile), ``pricing``
(rates from AWS; ``instance_types``, the offline table of GPUs and prices), ``plan`` (discover and plan),
``apply`` (one ensure-step per resource), ``failover`` (where each launch is
tried), ``waits`` (polling), ``state`` (what this machine remembers),
``bring_up``; then ``teardown`` (down, ls, reap), ``expiry`` (the instances'
timer, and extend) and ``inventory``.
The command line is ``rayrig/commands/cloud.py``.
"""

from cloud.ec2.aws import CloudError, connect
from cloud.ec2.bring_up import UpResult, up
from cloud.ec2.inventory import cluster_hosts
from cloud.ec2.spec import ClusterSpec, SpecError, load_spec
from cloud.ec2.teardown import ClusterInfo, down, list_clusters, reap
from cloud.ec2.waits import WAIT_TIMEOUT_S

__all__ = [
    "WAIT_TIMEOUT_S",
    "ClusterInfo",
    "ClusterSpec",
    "CloudError",
    "SpecError",
    "UpResult",
    "cluster_hosts",
    "connect",
    "down",
    "list_clusters",
    "load_spec",
    "reap",
    "up",
]
