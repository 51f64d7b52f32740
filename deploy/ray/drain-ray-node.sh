# Drain the node in the ray-node container before its host leaves the cluster (run by deploy/ray/absent.py).
#
#   bash -c "$(cat drain-ray-node.sh)" drain-ray-node NAME HOST BOUND
#
# NAME is the container and its systemd unit (NAME.service), HOST the host as the inventory
# names it (for messages), BOUND the seconds the node has to finish its work
# (ray_drain_timeout_s).
#
# Ray is asked to drain the node (`ray drain-node`, BOUND as its deadline): no new task or
# actor goes to it, and its raylet ends once the node is idle, and the container with it.
# The unit is told not to start the container again meanwhile. The script waits for that at
# most BOUND seconds, then fails with a warning (the deploy removes the node all the same)
# when the node did not answer, Ray did not take the request, or the node still had work.
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
if ! timeout "$bound" docker wait "$name" >/dev/null 2>&1; then
  echo "warning: $host: the node still had work after $bound s (ray_drain_timeout_s); it is removed now" >&2
  exit 1
fi
echo "$host: the node is drained"
