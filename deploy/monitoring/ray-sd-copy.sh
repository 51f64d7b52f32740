# Copy Ray's service-discovery file into a folder of its own, which Prometheus mounts read-only
# (run by rayrig-ray-sd.service on the head when it runs Prometheus; deploy/monitoring/ray_sd.py):
#
#   ray-sd-copy.sh RAY_TMP DEST
#
# RAY_TMP is the host folder ray-node sees as /tmp/ray, DEST the folder Prometheus reads ray.json
# from. Every 5 s the script reads RAY_TMP/prom_metrics_service_discovery.json, which Ray replaces
# by a rename (itself or the session's file it links to; a link to /tmp/ray/... is read in
# RAY_TMP), and when it changed puts a copy in DEST by a rename of its own, so that Prometheus,
# which watches DEST, always reads a whole file. What is copied must be a regular file of that
# name inside RAY_TMP, of at most 1 MiB, opened without following a link: ray-node, which writes
# RAY_TMP, cannot make the copier hand Prometheus any other file of the host.
set -u
src_dir=$1 dest=$2
name=prom_metrics_service_discovery.json
limit=1048576
target=$dest/ray.json
fresh=$dest/.ray.json.new

put() {  # put "$1" (a file in DEST) at $target, readable by Prometheus's user
    chmod 644 "$1" && mv -f "$1" "$target"
}

copy_once() {
    root=$(realpath -e "$src_dir" 2>/dev/null) || return 0
    path=$root/$name
    if [ -L "$path" ]; then
        link=$(readlink "$path") || return 0
        case $link in
        /tmp/ray/*) path=$root/${link#/tmp/ray/} ;;  # as ray-node sees it
        /*) return 0 ;;
        *) path=$root/$link ;;
        esac
    fi
    real=$(realpath -e "$path" 2>/dev/null) || return 0
    case $real in "$root"/*) ;; *) return 0 ;; esac
    [ "${real##*/}" = "$name" ] && [ -f "$real" ] || return 0
    dd if="$real" of="$fresh" iflag=nofollow,fullblock bs=$((limit + 1)) count=1 status=none 2>/dev/null || return 0
    if [ "$(stat -c %s "$fresh")" -gt "$limit" ] || cmp -s "$fresh" "$target"; then
        rm -f "$fresh"
        return 0
    fi
    put "$fresh"
}

[ -f "$target" ] || { printf '[]\n' >"$fresh" && put "$fresh"; }  # no Ray node yet: no target
while :; do
    copy_once
    sleep 5
done
