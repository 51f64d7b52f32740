#!/bin/sh
# Install a project's requirements into the Ray image's /opt/ray venv, with every
# package already there pinned, and collect the files the install added under
# LAYER_DIR (the final image copies exactly those).
# Usage: install-project.sh REQUIREMENTS LAYER_DIR; reads the build arg OFFLINE.
set -eu
requirements="$1"
layer="$2"
pip="/opt/ray/bin/python -m pip"
if [ "${OFFLINE:-0}" = "1" ]; then
    # Only the wheelhouse: no index, no network.
    pip_source="--no-index --find-links /wheelhouse"
else
    pip_source=""
fi
constraints=/usr/local/lib/rayrig/ray-image-constraints.txt
# name==version of every installed distribution; a version pip cannot read as a
# constraint (rare in conda bases) is left out rather than failing every build.
$pip list --format=freeze --disable-pip-version-check \
    | grep -E '^[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][0-9A-Za-z.+!_-]*$' >"$constraints"
ray_version() {
    # No .pyc written: the layer below holds only what the install adds.
    PYTHONDONTWRITEBYTECODE=1 /opt/ray/bin/python -c 'import ray; print(ray.__version__)'
}
ray_before=$(ray_version)
echo "rayrig: installing the project's requirements; the Ray image's $(wc -l <"$constraints") packages stay as they are"
marker=$(mktemp)
# shellcheck disable=SC2086 # word splitting of the option list is intended
$pip install --no-cache-dir --disable-pip-version-check --progress-bar off $pip_source \
    --constraint "$constraints" --requirement "$requirements"
ray_after=$(ray_version)
if [ "$ray_after" != "$ray_before" ]; then
    echo "rayrig: the project's requirements changed ray from $ray_before to $ray_after" >&2
    exit 1
fi
# The install's files: whatever under /opt/ray was created or written after the
# marker (ctime, which unpacking a wheel cannot set back).
mkdir -p "$layer"
cd /
find opt/ray -cnewer "$marker" ! -type d -print0 | tar --null --files-from=- -cf - | tar -C "$layer" -xpf -
mkdir -p "$layer/usr/local/lib/rayrig"
cp "$requirements" "$constraints" "$layer/usr/local/lib/rayrig/"
echo "rayrig: project layer: $(find "$layer/opt" ! -type d 2>/dev/null | wc -l) files, ray $ray_after"
