#!/bin/bash
# Wait for a stage of the background image pull (pull-image.sh) and report how it ended.
#   wait-image.sh DIR STAGE DEADLINE UNIT     STAGE: copied (the head's copy into the mirror) or result
# Prints "STAGE EXIT_CODE SECONDS [DIGEST]" on success (copied: the digest the head copied); on failure, the tools' own last words and what to do.
set -u
dir=$1 stage=$2 deadline=$3 unit=$4
while [ ! -f "$dir/$stage" ]; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
        systemctl stop "$unit" 2>/dev/null
        echo "the image pull did not finish before its deadline (ray_image_pull_timeout_s); its output:" >&2
        tail -n 20 "$dir/log" >&2 2>/dev/null
        exit 124
    fi
    if ! systemctl is-active --quiet "$unit" && [ ! -f "$dir/$stage" ]; then
        echo "the background image pull ($unit) stopped without a result; see: journalctl -u $unit" >&2
        tail -n 20 "$dir/log" >&2 2>/dev/null
        exit 1
    fi
    sleep 1
done
read -r code seconds digest <"$dir/$stage"
if [ "$code" != 0 ]; then
    echo "the image pull failed (exit $code after $seconds s); the registry's and the tools' words:" >&2
    tail -n 20 "$dir/log" >&2
    echo "check ray_image, docker_registry_auth and the registry's reachability from this host, then run the deploy again" >&2
    exit 1
fi
echo "$stage $code $seconds${digest:+ $digest}"
