#!/bin/bash
# Time the first deploy to N fresh lab hosts (checks off) until N Ray nodes are alive, and, with
# --ray-up, Ray's cluster launcher (`ray up`: local provider, Docker, autoscaler v1) on fresh hosts
# of the same kind with the same image, alternating round by round. Prints each round's seconds,
# rayrig's phase table, and the medians. Run from the project root with .venv built and the lab
# images cached (`make demo` once):
#   scripts/bench-deploy.sh [--hosts N] [--rounds R] [--ray-up] [-- PYINFRA_ARGS...]
# e.g. scripts/bench-deploy.sh --hosts 3 --rounds 3 --ray-up
#      scripts/bench-deploy.sh --hosts 6 -- --data image_mirror=head
# The lab is `rayrig-bench` (RAYRIG_LAB), made afresh for every deploy and taken down at the end.
# `ray up`'s own prerequisites are installed before its clock starts and not timed: rsync and the
# docker group on the hosts, and an image with rsync, an SSH client and Ray on the login PATH.
set -u
HOSTS=3 ROUNDS=1 RAYUP=0 EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
        --hosts) HOSTS=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --ray-up) RAYUP=1; shift ;;
        --) shift; EXTRA=("$@"); break ;;
        *) echo "unknown argument: $1 (see the comment at the top of $0)" >&2; exit 2 ;;
    esac
done
PY=.venv/bin/python
export RAYRIG_LAB=rayrig-bench
LOGS=$(mktemp -d)
trap '$PY -m rayrig lab down --name "$RAYRIG_LAB" >/dev/null 2>&1' EXIT

state() { $PY -c "import json; from cloud.lab import load_state; print(json.dumps(load_state('$RAYRIG_LAB')))"; }
field() { state | $PY -c "import json,sys; s=json.load(sys.stdin); print($1)"; }
on() {
    ssh -o UserKnownHostsFile="$(field "s['known_hosts']")" -o BatchMode=yes -o LogLevel=ERROR \
        -i "$(field "s['ssh_key']")" "$(field "s['ssh_user']")@$1" "$2"
}
alive() {
    on "$HEAD" "sudo docker exec $1 python -c \"import ray; ray.init(address='auto', logging_level='ERROR'); \
print(sum(1 for n in ray.nodes() if n['Alive']))\"" 2>/dev/null | tail -1
}
running() {  # how many hosts run the container $1: a cheap check, so that waiting costs the hosts nothing
    local n=0 h
    for h in $HEAD $WORKERS; do
        [ "$(on "$h" "sudo docker inspect -f '{{.State.Running}}' $1 2>/dev/null")" = true ] && n=$((n + 1))
    done
    echo $n
}
wait_alive() {  # until $HOSTS nodes are alive; Ray is asked only once every host runs the container
    for _ in $(seq 1 1200); do [ "$(running "$1")" = "$HOSTS" ] && break; sleep 1; done
    for _ in $(seq 1 300); do [ "$(alive "$1")" = "$HOSTS" ] && return 0; sleep 1; done
    return 1
}
fresh() {
    $PY -m rayrig lab down --name "$RAYRIG_LAB" >/dev/null 2>&1
    $PY -m rayrig lab up --name "$RAYRIG_LAB" --hosts "$HOSTS" >/dev/null 2>&1 || { echo "lab up failed" >&2; exit 1; }
    HEAD=$(field "[h['address'] for h in s['hosts'] if h['role']=='head'][0]")
    WORKERS=$(field "' '.join(h['address'] for h in s['hosts'] if h['role']!='head')")
    USER_=$(field "s['ssh_user']") KEY=$(field "s['ssh_key']") IMAGE=$(field "s['image']")
    REGC=$(field "s['registry_container']")
}
seconds_since() { $PY -c "import time,sys; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$1"; }
median() { $PY -c "import statistics,sys; v=[float(x) for x in sys.argv[1:]]; print(f'{statistics.median(v):.1f}' if v else '-')" "$@"; }

ray_up() {
    local r=$1 reg=${IMAGE%%/*} port
    port=$(docker port "$REGC" 5000 | head -1 | sed 's/.*://')
    command -v rsync >/dev/null || apt-get install -y -qq rsync >/dev/null
    printf 'FROM %s\nUSER root\nRUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rsync openssh-client >/dev/null && echo "export PATH=/opt/ray/bin:\\$PATH" > /etc/profile.d/ray.sh\n' \
        "rayrig/lab-ray:2.60.0" | docker build -q -t "127.0.0.1:$port/anchor/lab-ray:2.60.0" - >/dev/null 2>&1
    docker push -q "127.0.0.1:$port/anchor/lab-ray:2.60.0" >/dev/null
    for h in $HEAD $WORKERS; do
        on "$h" "sudo groupadd -f docker && sudo usermod -aG docker $USER_ && sudo apt-get update -qq && \
sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rsync >/dev/null 2>&1" &
    done
    wait
    cat >"$LOGS/cluster.yaml" <<YAML
cluster_name: anchor
provider: {type: local, head_ip: $HEAD, worker_ips: [$(echo $WORKERS | sed 's/ /, /g')]}
auth: {ssh_user: $USER_, ssh_private_key: $KEY}
min_workers: $((HOSTS - 1))
max_workers: $((HOSTS - 1))
docker: {image: "$reg/anchor/lab-ray:2.60.0", container_name: ray_container, pull_before_run: true, run_options: ["--ulimit nofile=20000:20000"]}
initialization_commands:
  - sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
  - echo '{"insecure-registries":["$reg"]}' | sudo tee /etc/docker/daemon.json && sudo systemctl restart docker
head_start_ray_commands:
  - ray stop
  - ray start --head --port=6379 --autoscaling-config=~/ray_bootstrap_config.yaml --num-cpus=2 --disable-usage-stats
worker_start_ray_commands:
  - ray stop
  - ray start --address=\$RAY_HEAD_IP:6379 --num-cpus=2 --disable-usage-stats
YAML
    local t0
    t0=$(date +%s.%N)
    timeout 1800 env RAY_UP_enable_autoscaler_v2=0 .venv/bin/ray up -y --no-config-cache "$LOGS/cluster.yaml" \
        >"$LOGS/rayup.$r.log" 2>&1
    wait_alive ray_container && RAYUP_S+=("$(seconds_since "$t0")") && echo "ray-up  round $r: ${RAYUP_S[-1]} s"
}

rayrig() {
    local r=$1 t0
    t0=$(date +%s.%N)
    .venv/bin/pyinfra inventories/lab.py deploy/cluster.py -y --data checks_enabled=false "${EXTRA[@]}" \
        >"$LOGS/rayrig.$r.log" 2>&1
    if wait_alive ray-node; then
        RAYRIG_S+=("$(seconds_since "$t0")")
        echo "rayrig  round $r: ${RAYRIG_S[-1]} s"
        sed -n '/Phase timings/,/^ *total/p' "$LOGS/rayrig.$r.log"
    else
        echo "rayrig  round $r: $HOSTS nodes never came up; see $LOGS/rayrig.$r.log"
    fi
}

RAYUP_S=() RAYRIG_S=()
echo "$HOSTS lab hosts, $ROUNDS round(s); logs in $LOGS"
for r in $(seq 1 "$ROUNDS"); do
    if [ "$RAYUP" = 1 ] && [ $((r % 2)) = 0 ]; then fresh; rayrig "$r"; fresh; ray_up "$r"
    elif [ "$RAYUP" = 1 ]; then fresh; ray_up "$r"; fresh; rayrig "$r"
    else fresh; rayrig "$r"; fi
done
echo "median: rayrig $(median "${RAYRIG_S[@]}") s over ${#RAYRIG_S[@]} round(s)" \
    "$([ "$RAYUP" = 1 ] && echo "; ray up $(median "${RAYUP_S[@]}") s over ${#RAYUP_S[@]}")"
