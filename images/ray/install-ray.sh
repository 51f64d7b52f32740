#!/bin/sh
# Create the /opt/ray venv and install Ray (and torch unless the base has it).
# Reads the build args RAY_VERSION, TORCH_REQUIREMENT, EXTRA_REQUIREMENTS, OFFLINE.
set -eu
: "${RAY_VERSION:?the build arg RAY_VERSION is required (rayrig image build passes ray_version from inventories/group_data/all.py)}"
python3 -m venv --system-site-packages /opt/ray
pip="/opt/ray/bin/python -m pip"
if [ "${OFFLINE:-0}" = "1" ]; then
    # Only the wheelhouse: no index, no network.
    pip_source="--no-index --find-links /wheelhouse"
else
    pip_source=""
fi
requirements="ray[default,train]==${RAY_VERSION}"
if [ -n "${TORCH_REQUIREMENT:-}" ]; then
    if /opt/ray/bin/python -c 'import torch' >/dev/null 2>&1; then
        echo "rayrig: keeping the base image's torch $(/opt/ray/bin/python -c 'import torch; print(torch.__version__)')"
    else
        requirements="$requirements ${TORCH_REQUIREMENT}"
    fi
fi
requirements="$requirements ${EXTRA_REQUIREMENTS:-}"
echo "rayrig: installing $requirements"
# shellcheck disable=SC2086 # word splitting of the option and requirement lists is intended
$pip install --no-cache-dir --disable-pip-version-check --progress-bar off $pip_source $requirements
/opt/ray/bin/python -c 'import ray; print("rayrig: installed ray", ray.__version__)'
