# Replace the ray-node container without losing the node (run by deploy/ray/ray_node.py).
#
#   bash -c "$(cat replace-ray-node.sh)" replace-ray-node NAME PREVIOUS HOST WAIT docker create ARGS...
#
# NAME is the container and its systemd unit (NAME.service), PREVIOUS the name the old
# container keeps meanwhile, HOST the host as the inventory names it (for messages), WAIT
# the seconds the new node has to join the cluster, and the rest the command that creates
# the new container.
#
# Ray's ports are pinned, so the old and the new node cannot run side by side: the old
# container is stopped and kept as PREVIOUS while the new one starts under the unit.
# Once the new node is alive in the cluster the previous container is removed. If it is
# not alive within WAIT seconds, the new container is removed, the previous one is renamed
# back and started by the unit, and the step fails with Ray's own error line.
set -u
name=$1 previous=$2 host=$3 wait_s=$4
shift 4

exists() { docker container inspect "$1" >/dev/null 2>&1; }

# Whether the node in the container is alive in the cluster: a driver started inside it
# connects only once the GCS lists the container's own raylet as alive.
JOINED='
import ray
ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
me = ray.get_runtime_context().get_node_id()
raise SystemExit(0 if any(n["NodeID"] == me and n["Alive"] for n in ray.nodes()) else 1)
'
wait_for_join() {
  local deadline=$((SECONDS + wait_s)) left
  while left=$((deadline - SECONDS)); ((left > 0)); do
    timeout "$left" docker exec "$name" python -c "$JOINED" >/dev/null 2>&1 && return 0
    sleep 2
  done
  return 1
}

# Ray's own complaint: the last exception in the new container's log (a traceback's last
# line), else the last line that names an error, else its last line.
ray_error() {
  local logs line
  logs=$(docker logs --tail 400 "$name" 2>&1)
  line=$(grep -E '^[A-Za-z_.]*(Error|Exception)\b' <<<"$logs" | tail -n 1)
  [ -n "$line" ] || line=$(grep -E '(Error|Exception|ERROR)\b' <<<"$logs" | tail -n 1)
  [ -n "$line" ] || line=$(grep -v '^[[:space:]]*$' <<<"$logs" | tail -n 1)
  echo "${line:-nothing in its log}"
}

# Fail naming the host, what went wrong and, when given, what Ray said; before that, the
# new container goes and the previous one, if any, comes back under the unit.
fail() {
  local what=$1 said=${2:-}
  systemctl stop "$name.service" 2>/dev/null
  docker rm --force "$name" >/dev/null 2>&1
  if ! exists "$previous"; then
    what="$what; there was no previous container to restore"
  elif docker rename "$previous" "$name" && systemctl start "$name.service" && wait_for_join; then
    what="$what; the previous container is running again and has rejoined"
  else
    what="$what; the previous container is back as $name but has not rejoined within $wait_s s"
  fi
  printf "%s\n" "$host: $what.${said:+ Ray said: $said}" >&2
  exit 1
}

systemctl stop "$name.service" 2>/dev/null
if exists "$name"; then
  if exists "$previous"; then
    # A run cut short left both: the kept one is the last that joined.
    docker rm --force "$name" >/dev/null
  else
    docker rename "$name" "$previous" || { systemctl start "$name.service"; exit 1; }
  fi
fi
exists "$previous" && docker stop --time 30 "$previous" >/dev/null

"$@" >/dev/null || fail "docker could not create the new $name container"
systemctl enable "$name.service" 2>/dev/null
systemctl start "$name.service" || fail "the $name unit did not start" "$(ray_error)"
wait_for_join || fail "the new $name container did not join the cluster within $wait_s s" "$(ray_error)"
docker rm --force "$previous" >/dev/null 2>&1
exit 0
