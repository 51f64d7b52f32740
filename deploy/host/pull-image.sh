#!/bin/bash
# Pull the Ray image in the background while the deploy goes on; the deploy's wait step reads the result.
# Run by systemd-run as the unit rayrig-image-pull (deploy/host/ray_image.py); every value is an argument:
#   pull-image.sh DIR TIMEOUT_S IMAGE PULL_REF DOCKER_CONFIG COPY_SRC COPY_DEST SRC_TLS_VERIFY AUTHFILE
# DIR gets `log` (the tools' own output) and, when each stage ends, `copied` and `result`, both
# "EXIT_CODE SECONDS". COPY_SRC set (the head, with image_mirror = "head"): skopeo copies the image
# into the head's mirror first, once from upstream for the whole cluster. PULL_REF other than IMAGE:
# the image comes from the mirror and is tagged IMAGE, so that ray-node runs the name the data gives.
set -u
dir=$1 timeout_s=$2 image=$3 ref=$4 config=$5 copy_src=$6 copy_dest=$7 tls_verify=$8 authfile=$9
mkdir -p "$dir" && rm -f "$dir/copied" "$dir/result" || exit 1
exec >"$dir/log" 2>&1
start=$(date +%s%N)
deadline=$(($(date +%s) + timeout_s))
left() { echo $((deadline - $(date +%s))); }
mark() {
    local ms=$((($(date +%s%N) - start) / 1000000))
    printf '%s %d.%d\n' "$2" $((ms / 1000)) $((ms % 1000 / 100)) >"$dir/$1.tmp" && mv "$dir/$1.tmp" "$dir/$1"
}
finish() { mark result "$1"; exit "$1"; }

if [ -n "$copy_src" ]; then
    auth=()
    [ -n "$authfile" ] && auth=(--src-authfile "$authfile")
    timeout "$(left)" skopeo copy --quiet --retry-times 3 "${auth[@]}" --src-tls-verify="$tls_verify" \
        --dest-tls-verify=false "docker://$copy_src" "docker://$copy_dest"
    code=$?
    mark copied "$code"
    [ "$code" = 0 ] || finish "$code"
fi

docker_cmd=(docker)
[ -n "$config" ] && docker_cmd=(docker --config "$config")
# Retried: a worker finds the mirror empty until the head has copied the image into it ("manifest
# unknown"), and a later step of the deploy may restart Docker under a pull. Any other error is retried three times.
others=0
while :; do
    [ "$(left)" -gt 0 ] || { echo "rayrig: no pull finished before the deadline (ray_image_pull_timeout_s)"; finish 124; }
    out=$(timeout "$(left)" "${docker_cmd[@]}" pull --quiet "$ref" 2>&1) && break
    echo "$out"
    case "$out" in
        *"manifest unknown"*|*"not found"*|*"Cannot connect to the Docker daemon"*|*"connection refused"*)
            [ "$ref" != "$image" ] || [ "${out#*Docker daemon}" != "$out" ] || others=$((others + 1)) ;;
        *) others=$((others + 1)) ;;
    esac
    [ "$others" -lt 3 ] || finish 1
    sleep 2
done
if [ "$ref" != "$image" ]; then
    docker tag "$ref" "$image" && docker rmi "$ref" >/dev/null || finish 1
fi
finish 0
