#!/bin/sh
# Create the /opt/ray venv and install Ray (and torch unless the base has it).
# Reads the build args RAY_VERSION, TORCH_REQUIREMENT, EXTRA_REQUIREMENTS, OFFLINE.
# Then moves the largest packages out to /opt/ray-layers/N (see the end).
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

# The largest packages (torch, ray, pyarrow: split_mb or more each, at most split_layers of them)
# move to /opt/ray-layers/N/ under their own path, so that the final stage copies each as a layer
# of its own: docker push compresses layers side by side, and a pull downloads them side by side,
# where one 1.5 GB layer is one gzip stream. Together the layers are /opt/ray exactly as installed.
split_mb=100
split_layers=3
n=0
for dir in $(du -sm /opt/ray/lib/python3*/site-packages/* | sort -rn | awk -v mb="$split_mb" '$1 >= mb {print $2}'); do
    [ "$n" -lt "$split_layers" ] || break
    n=$((n + 1))
    mkdir -p "/opt/ray-layers/$n$(dirname "$dir")"
    mv "$dir" "/opt/ray-layers/$n$dir"
    echo "rayrig: layer $n: $dir"
done
i=1
while [ "$i" -le "$split_layers" ]; do  # the final stage copies every slot, empty or not
    mkdir -p "/opt/ray-layers/$i"
    i=$((i + 1))
done
