#!/usr/bin/env bash
# Make sure this machine has the programs rayrig's make targets need, installing them when it can.
#
#   scripts/ensure-lab-tools.sh [--dry-run] PURPOSE...
#
# PURPOSE is what the programs are for (make's targets call it; .ci/run calls it for all three):
#   venv   python3's venv with pip (Debian and Ubuntu ship it apart: python3-venv)
#   lab    the local lab: a Docker engine and its client (docker.io), ssh and ssh-keygen
#          (openssh-client), and, when root,
#          debootstrap (the lab's Debian image when no registry serves debian:bookworm; it runs as
#          root only, so a user who is not root is not asked to install it)
#   test   the lab's, make, and when root nft (nftables: the firewall tests check the rendered
#          rulesets), s3fs (the storage tests mount a bucket) and promtool and prometheus
#          (Debian's prometheus, not left running: the monitoring tests check the rendered
#          configuration and rules with them), whose tests skip without root
#
# Only what is missing is installed: as root on Debian or Ubuntu with apt-get; otherwise the
# script names the programs and the exact command that installs them, and exits 1.
# --dry-run prints what it would do and does nothing (the exit status is the same).
# RAYRIG_TOOLS_UID decides for another user id than `id -u` (for a dry run).
set -euo pipefail

dry_run=0
purposes=()
for arg in "$@"; do
    case "$arg" in
        --dry-run) dry_run=1 ;;
        venv | lab | test) purposes+=("$arg") ;;
        *) echo "usage: $0 [--dry-run] venv|lab|test..." >&2; exit 2 ;;
    esac
done
[ "${#purposes[@]}" -gt 0 ] || { echo "usage: $0 [--dry-run] venv|lab|test..." >&2; exit 2; }

uid="${RAYRIG_TOOLS_UID:-$(id -u)}"
missing=()   # "program package" pairs
packages=()

lacks() {  # lacks WHAT PACKAGE: note WHAT and PACKAGE, once each
    case " ${missing[*]-} " in *" $1 "*) ;; *) missing+=("$1") ;; esac
    case " ${packages[*]-} " in *" $2 "*) ;; *) packages+=("$2") ;; esac
}

need() {  # need PROGRAM PACKAGE: PROGRAM must be on PATH
    command -v "$1" >/dev/null 2>&1 || lacks "$1" "$2"
}

# The Docker *engine*, not the client: many machines ship a `docker` client alone (no dockerd, no
# socket), and a client on PATH says nothing about an engine. There is one when dockerd is on PATH
# (ensure-docker.sh starts it) or when a daemon already answers (a remote DOCKER_HOST, Docker
# Desktop, a rootless engine started elsewhere).
need_docker_engine() {
    if command -v dockerd >/dev/null 2>&1; then
        return
    fi
    if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
        return
    fi
    lacks "a Docker engine (dockerd)" docker.io
}

needs_venv() {  # python3 -m venv works only with ensurepip, which Debian and Ubuntu ship in python3-venv
    if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
        missing+=("python3's venv")
        packages+=("python3-venv")
    fi
}

lab_tools() {
    need_docker_engine
    need docker docker.io
    need ssh openssh-client
    need ssh-keygen openssh-client
    if [ "$uid" = 0 ]; then
        need debootstrap debootstrap
    fi
}

for purpose in "${purposes[@]}"; do
    case "$purpose" in
        venv) needs_venv ;;
        lab) lab_tools ;;
        test)
            lab_tools
            need make make
            if [ "$uid" = 0 ]; then  # their tests need root (netlink, FUSE mounts) and skip without it
                need nft nftables
                need s3fs s3fs
                need promtool prometheus
                need prometheus prometheus
            fi
            ;;
    esac
done

[ "${#packages[@]}" -eq 0 ] && exit 0

if [ "$uid" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing what rayrig needs (${purposes[*]}): ${packages[*]}"
    if [ "$dry_run" = 1 ]; then
        echo "would run: apt-get update && apt-get install -y ${packages[*]}"
        exit 0
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${packages[@]}" >/dev/null
    case " ${packages[*]} " in
        *" prometheus "*)  # only its programs are wanted: no server left running where systemd runs
            if [ -d /run/systemd/system ]; then
                systemctl disable --now prometheus.service prometheus-node-exporter.service >/dev/null 2>&1 || true
            fi
            ;;
    esac
    exit 0
fi

{
    listed=$(printf '%s, ' "${missing[@]}")
    echo "rayrig needs programs this machine lacks (for ${purposes[*]}): ${listed%, }"
    if command -v apt-get >/dev/null 2>&1; then
        echo "  install them:  sudo apt-get install -y ${packages[*]}"
    else
        echo "  install them with your system's packages (on Debian or Ubuntu: ${packages[*]})"
    fi
    echo "  then run make again"
} >&2
exit 1
