#!/usr/bin/env bash
# The docs site's pictures (docs/images/), made from a running cluster: `make docs-pictures`.
#
#   scripts/docs-pictures.sh [INVENTORY]
#
# INVENTORY defaults to inventories/lab.py: the local lab is brought up (Docker started if needed),
# deployed with the checks, photographed and taken down again. Another inventory is a running cluster:
# its checks run (`rayrig check`) and its dashboards are photographed; nothing on its hosts changes.
# Headless Chromium takes the screenshots: Debian's chromium, installed here as root with apt-get when
# missing, as scripts/ensure-lab-tools.sh installs the lab's programs. What each picture shows and how:
# scripts/docs_pictures.py.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
inventory="${1:-inventories/lab.py}"

if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "==> installing Debian's chromium (headless screenshots)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq chromium >/dev/null
    else
        echo "docs-pictures needs Chromium: sudo apt-get install -y chromium, then run this again" >&2
        exit 1
    fi
fi

if [ "$(realpath "$inventory")" = "$root/inventories/lab.py" ]; then
    "$root/scripts/ensure-docker.sh"
fi

exec "$root/.venv/bin/python" "$root/scripts/docs_pictures.py" "$@"
