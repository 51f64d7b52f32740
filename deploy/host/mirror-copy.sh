#!/bin/bash
# Copy one image from upstream into the head's image mirror (image_mirror = "head"): the only way
# anything is written there. deploy/host/image_mirror.py has the why; every value is an argument:
#   mirror-copy.sh SOURCE DEST WRITER_ADDR WRITER_CONFIG DIGEST_FILE SRC_TLS_VERIFY AUTHFILE TIMEOUT_S
# The mirror's registry answers the cluster read-only. For the copy, a second registry process on the
# same storage (WRITER_CONFIG) answers on the head's loopback (WRITER_ADDR), only while the copy runs
# and one copy at a time. skopeo keeps upstream's manifest byte for byte (--preserve-digests, so its
# digest is upstream's) and writes that digest to DIGEST_FILE; the last line printed is
# "digest sha256:...": every host pulls that digest from the mirror, never a tag.
set -u
src=$1 dest=$2 writer=$3 config=$4 digestfile=$5 tls_verify=$6 authfile=$7 timeout_s=$8
exec 9>/run/rayrig-mirror-copy.lock
flock 9
mkdir -p "$(dirname "$digestfile")" && rm -f "$digestfile" || exit 1
setpriv --reuid=docker-registry --regid=docker-registry --init-groups -- /usr/bin/docker-registry serve "$config" &
pid=$!
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/${writer%:*}/${writer##*:}") 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || { echo "rayrig: the mirror's copy registry did not start (port ${writer##*:} taken?)" >&2; exit 1; }
    sleep 0.1
done
auth=()
[ -n "$authfile" ] && auth=(--src-authfile "$authfile")
timeout "$timeout_s" skopeo copy --quiet --retry-times 3 --preserve-digests "${auth[@]}" \
    --src-tls-verify="$tls_verify" --dest-tls-verify=false --digestfile "$digestfile" \
    "docker://$src" "docker://$writer/$dest"
code=$?
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
[ "$code" = 0 ] || exit "$code"
digest=$(cat "$digestfile")
case "$digest" in
    sha256:*) echo "digest $digest" ;;
    *) echo "rayrig: skopeo wrote no digest for $src" >&2; exit 1 ;;
esac
