#!/usr/bin/env bash
# Make sure a Docker daemon answers on this machine, for the local lab.
# Starts Debian's or Ubuntu's docker.io where it can (installed by ensure-lab-tools.sh); otherwise says
# exactly what is missing.
set -euo pipefail

if docker info >/dev/null 2>&1; then
    exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
    # Installs docker.io (and the lab's other programs) as root with apt, or says what to install.
    "$(dirname "$0")/ensure-lab-tools.sh" lab
    if ! command -v dockerd >/dev/null 2>&1; then
        echo "rayrig needs a Docker engine for the local lab, and none is installed." >&2
        echo "  Debian/Ubuntu: sudo apt-get install docker.io && sudo systemctl start docker" >&2
        echo "  elsewhere:     install Docker Engine and start it, then run this again" >&2
        exit 1
    fi
fi

if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    echo "==> starting Docker with systemd"
    systemctl start docker || true
elif [ "$(id -u)" = 0 ]; then
    echo "==> starting dockerd in the background (log: /var/log/rayrig-dockerd.log)"
    nohup dockerd >/var/log/rayrig-dockerd.log 2>&1 &
else
    echo "Docker is installed but not running; start it (sudo systemctl start docker) and run this again." >&2
    exit 1
fi

for _ in $(seq 60); do
    if docker info >/dev/null 2>&1; then
        exit 0
    fi
    sleep 1
done
echo "dockerd did not answer within 60 s; see /var/log/rayrig-dockerd.log" >&2
exit 1
