# Drain the node in the ray-node container before its host leaves the cluster (run by deploy/ray/absent.py).
#
#   bash -c "$(cat drain-ray-node.sh)" drain-ray-node NAME HOST BOUND
#
# NAME is the container and its systemd unit (NAME.service), HOST the host as the inventory
# names it (for messages), BOUND the seconds the node has to finish its work
# (ray_drain_timeout_s).
#
# Ray is asked to drain the node (`ray drain-node`, BOUND as its deadline): no new task or
# actor goes to it. A drained raylet does not end by itself (Ray leaves that to whoever
# removes the node), so the script waits until the GCS sees no work left on the node (or
# until the container ended), and the deploy's next step stops it. The unit is told not to
# start the container again meanwhile. The script waits at most BOUND seconds, then fails
# with a warning (the deploy removes the node all the same) when the node did not answer, Ray
# did not take the request, or the node still had work.
set -u
name=$1 host=$2 bound=$3

# The node's id: a driver started inside the container runs on that node.
NODE_ID='
import ray
ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
print("RAYRIG_NODE_ID", ray.get_runtime_context().get_node_id())
'
node=$(timeout 60 docker exec "$name" python -c "$NODE_ID" 2>/dev/null | sed -n 's/^RAYRIG_NODE_ID //p')
if [ -z "$node" ]; then
  echo "warning: $host: the Ray node in $name did not answer, so it was not drained; it is removed now" >&2
  exit 1
fi

# A runtime drop-in (gone at the next boot): the container that ends once drained stays down.
mkdir -p "/run/systemd/system/$name.service.d"
printf '[Service]\nRestart=no\n' > "/run/systemd/system/$name.service.d/rayrig-drain.conf"
systemctl daemon-reload

if ! said=$(timeout 60 docker exec "$name" ray drain-node --address=auto --node-id="$node" \
    --reason=DRAIN_NODE_REASON_PREEMPTION --reason-message="rayrig: ray_state = absent" \
    --deadline-remaining-seconds="$bound" 2>&1); then
  echo "warning: $host: Ray did not drain the node ($(printf '%s\n' "$said" | tail -n 1)); it is removed now" >&2
  exit 1
fi
# Whether the node (argv[1]) has finished its work, as the GCS sees it (autoscaler v2's view, read
# without `ray.init`: a draining node takes no driver). A drained node with no work left is DEAD to
# the GCS (its raylet still runs, until it is stopped), an undrained one with none IDLE; one with
# work is DRAINING.
IDLE='
import sys
from ray._private.services import canonicalize_bootstrap_address_or_die
from ray._raylet import GcsClient
from ray.autoscaler.v2.sdk import get_cluster_resource_state
from ray.core.generated.autoscaler_pb2 import NodeStatus
gcs = GcsClient(address=canonicalize_bootstrap_address_or_die("auto"))
mine = [n for n in get_cluster_resource_state(gcs).node_states if n.node_id.hex() == sys.argv[1]]
raise SystemExit(0 if not mine or mine[0].status in (NodeStatus.DEAD, NodeStatus.IDLE) else 1)
'
deadline=$((SECONDS + bound))
until timeout 60 docker exec "$name" python -c "$IDLE" "$node" >/dev/null 2>&1; do
  [ "$(docker container inspect --format '{{.State.Running}}' "$name" 2>/dev/null)" = true ] || break
  if ((SECONDS >= deadline)); then
    echo "warning: $host: the node still had work after $bound s (ray_drain_timeout_s); it is removed now" >&2
    exit 1
  fi
  sleep 1
done
echo "$host: the node is drained"
