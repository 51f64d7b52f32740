#!/bin/bash
# Pull the Ray image in the background while the deploy goes on; the deploy's wait step reads the result.
# Run by systemd-run as the unit rayrig-image-pull (deploy/host/ray_image.py); every value is an argument:
#   pull-image.sh DIR TIMEOUT_S IMAGE PULL_REF DOCKER_CONFIG COPY_SRC COPY_DEST SRC_TLS_VERIFY AUTHFILE
#                 MODE WRITER_ADDR WRITER_CONFIG
# DIR gets `log` (the tools' own output) and, when each stage ends, `copied` ("EXIT_CODE SECONDS DIGEST")
# and `result` ("EXIT_CODE SECONDS"). COPY_SRC set (the head, with image_mirror = "head"): mirror-copy.sh
# copies the image into the head's mirror (as COPY_DEST, path:tag) first, once from upstream for the
# whole cluster, and the head then pulls PULL_REF by the digest it copied.
# MODE "tag": PULL_REF other than IMAGE is tagged IMAGE, so that ray-node runs the name the deploy gives
# (ray_image, or REPOSITORY:rayrig-<digest> for one pinned by digest, which is pulled by its digest).
# MODE "warm" (a worker of the mirror): PULL_REF, the run's tag, is only pulled ahead; the deploy pulls
# the digest the head copied once it has it, and tags that (deploy/host/image_mirror.py PinnedPull).
set -u
dir=$1 timeout_s=$2 image=$3 ref=$4 config=$5 copy_src=$6 copy_dest=$7 tls_verify=$8 authfile=$9 mode=${10} writer=${11} writer_config=${12}
mkdir -p "$dir" && rm -f "$dir/copied" "$dir/result" || exit 1
exec >"$dir/log" 2>&1
start=$(date +%s%N)
deadline=$(($(date +%s) + timeout_s))
left() { echo $((deadline - $(date +%s))); }
mark() {
    local ms=$((($(date +%s%N) - start) / 1000000))
    printf '%s %d.%d%s\n' "$2" $((ms / 1000)) $((ms % 1000 / 100)) "${3:+ $3}" >"$dir/$1.tmp" && mv "$dir/$1.tmp" "$dir/$1"
}
finish() { mark result "$1"; exit "$1"; }

if [ -n "$copy_src" ]; then
    out=$(/usr/local/lib/rayrig/mirror-copy.sh "$copy_src" "$copy_dest" "$writer" "$writer_config" \
        "$dir/digest" "$tls_verify" "$authfile" "$(left)" 2>&1)
    code=$?
    echo "$out"
    digest=$(sed -n 's/^digest \(sha256:[0-9a-f]\{64\}\)$/\1/p' <<<"$out" | tail -n 1)
    [ "$code" != 0 ] || [ -n "$digest" ] || code=1
    mark copied "$code" "$digest"
    [ "$code" = 0 ] || finish "$code"
    [ -z "$ref" ] || ref="${ref%:*}@$digest"  # the head pulls what it copied, by digest
fi
[ -n "$ref" ] || finish 0

docker_cmd=(docker)
[ -n "$config" ] && docker_cmd=(docker --config "$config")
# Retried: a worker finds the mirror empty, or not answering yet, until the head has copied the image
# and started the registry ("manifest unknown", "connection refused"), and a later step of the deploy
# may restart Docker under a pull. Any other error is retried three times.
others=0
from_mirror=0  # the head's own mirror: empty or not answering until the head has copied the image
{ [ -n "$copy_src" ] || [ "$mode" = warm ]; } && from_mirror=1
while :; do
    [ "$(left)" -gt 0 ] || { echo "rayrig: no pull finished before the deadline (ray_image_pull_timeout_s)"; finish 124; }
    out=$(timeout "$(left)" "${docker_cmd[@]}" pull --quiet "$ref" 2>&1) && break
    echo "$out"
    case "$out" in
        *"manifest unknown"*|*"not found"*|*"Cannot connect to the Docker daemon"*|*"connection refused"*)
            [ "$from_mirror" = 1 ] || [ "${out#*Docker daemon}" != "$out" ] || others=$((others + 1)) ;;
        *) others=$((others + 1)) ;;
    esac
    [ "$others" -lt 3 ] || finish 1
    sleep 2
done
if [ "$mode" = tag ] && [ "$ref" != "$image" ]; then
    docker tag "$ref" "$image" && docker rmi "$ref" >/dev/null || finish 1
fi
finish 0
