#!/bin/bash
# rayrig's firewall guard: nothing rayrig runs listens to the network while rayrig's table is not loaded.
# Run by rayrig-firewall-guard.service (deploy/firewall/guard.py); every value is an argument:
#   firewall-guard.sh TABLE RULESET FIREWALL_UNIT INTERVAL_S GRACE_S
# Every INTERVAL_S it reads the loaded table. When it is missing (nft flush ruleset, systemctl stop
# nftables, systemctl stop rayrig-firewall), or was loaded from another ruleset than RULESET for GRACE_S
# (a deploy loads a new one seconds after writing it), the services that want FIREWALL_UNIT (ray-node,
# the exporters, the image mirror, Prometheus and Grafana) stop; those it stopped start again once the
# table is back.
set -u
table=$1 ruleset=$2 unit=$3 interval=$4 grace=$5
state=/run/rayrig/firewall-guard
mkdir -p "$state" || exit 1
digest_in() { sed -n 's/^[[:space:]]*comment "rayrig ruleset \([0-9a-f]*\)"$/\1/p' | head -n 1; }
guarded() { systemctl show --property WantedBy --value "$unit" | tr ' ' '\n' | grep '\.service$'; }
# A restart of nftables.service or of FIREWALL_UNIT flushes the table and loads it again a moment later:
# a table missing at one look only, or while either unit is (de)activating (for up to 10 s), is that.
settling() {
    local u
    for u in nftables.service "$unit"; do
        case $(systemctl show --property ActiveState --value "$u" 2>/dev/null) in
            activating | deactivating | reloading) return 0 ;;
        esac
    done
    return 1
}
since="" missing=""
while :; do
    now=$(date +%s)
    # shellcheck disable=SC2086  # TABLE is "FAMILY NAME", two words
    loaded=$(nft list table $table 2>/dev/null | digest_in)
    expected=$(digest_in <"$ruleset" 2>/dev/null)
    why=""
    if [ -z "$loaded" ]; then
        since="" missing=${missing:-$now}
        if [ "$missing" != "$now" ] && { [ $((now - missing)) -ge 10 ] || ! settling; }; then
            why="rayrig's table ($table) is not loaded"
        fi
    elif [ "$loaded" != "$expected" ]; then
        missing="" since=${since:-$now}
        [ $((now - since)) -lt "$grace" ] || why="rayrig's table ($table) is not the one in $ruleset"
    else
        since="" missing=""
    fi
    if [ -n "$why" ] && [ ! -e "$state/stopped" ]; then
        units=$(for u in $(guarded); do systemctl is-active --quiet "$u" && echo "$u"; done | tr '\n' ' ')
        echo "$units" >"$state/stopped.tmp" && mv "$state/stopped.tmp" "$state/stopped"
        echo "$why: stopping ${units:-nothing} until it is loaded again"
        # shellcheck disable=SC2086
        [ -z "${units// /}" ] || systemctl stop $units
    elif [ -z "$why" ] && [ -z "$since" ] && [ -z "$missing" ] && [ -e "$state/stopped" ]; then
        units=$(cat "$state/stopped")
        echo "rayrig's table ($table) is loaded again: starting ${units:-nothing}"
        # shellcheck disable=SC2086
        [ -z "${units// /}" ] || systemctl start $units
        rm -f "$state/stopped"
    fi
    sleep "$interval"
done
