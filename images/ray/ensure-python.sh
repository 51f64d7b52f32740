#!/bin/sh
# Make sure the image has a python3 that can create virtual environments.
# pytorch/pytorch images (conda python) already do; Debian/Ubuntu bases get
# python3 and python3-venv from apt.
set -eu
if command -v python3 >/dev/null 2>&1 && python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    echo "rayrig: using $(command -v python3) ($(python3 --version 2>&1))"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "rayrig: the base image has no python3 with venv and no apt-get to install it" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends python3 python3-venv
rm -rf /var/lib/apt/lists/*
echo "rayrig: installed $(python3 --version 2>&1)"
