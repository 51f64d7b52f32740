# Fetch a package repository's signing key, check its fingerprints, and only then put it in place
# (run by deploy/host/repo_keys.py):
#
#   bash -c "$(cat fetch-key.sh)" fetch-key HOST URL DEST IMPORT FINGERPRINT...
#
# HOST is the inventory host (for messages), URL the key's https URL, DEST where it goes, IMPORT
# "rpm" to import it into rpm's database once it is in place (else "none"), FINGERPRINT... the
# fingerprints pinned for it. The key is downloaded into a private folder (mktemp -d: 0700,
# root's), and every primary key in the file must carry one of the pinned fingerprints (gpg
# --show-keys, which reads the file without importing anything): otherwise the script fails
# naming the URL, what was expected and what was found, and nothing is written.
set -u
host=$1 url=$2 dest=$3 import=$4
shift 4
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

if ! curl -fsSL --proto '=https' --tlsv1.2 -o "$tmp/key" "$url"; then
    echo "host $host: could not download the signing key $url (expected an https URL that serves it)" >&2
    exit 1
fi
# The fingerprint of each primary key: the fpr record right after its pub record.
found=$(gpg --homedir "$tmp" --batch --no-tty --with-colons --show-keys "$tmp/key" 2>/dev/null |
    awk -F: '$1 == "pub" || $1 == "sub" || $1 == "sec" || $1 == "ssb" { kind = $1 }
             $1 == "fpr" && kind == "pub" { print $10; kind = "" }' | sort -u)
bad=""
for fingerprint in $found; do
    case " $* " in
    *" $fingerprint "*) ;;
    *) bad="$bad $fingerprint" ;;
    esac
done
if [ -z "$found" ] || [ -n "$bad" ]; then
    found=$(echo $found)  # one line
    echo "host $host: the signing key at $url is not the one pinned: expected $*," \
        "found ${found:-no OpenPGP key}; nothing was written to $dest" >&2
    exit 1
fi

mkdir -p "$(dirname "$dest")" &&
    install -m 644 "$tmp/key" "$dest.rayrig-new" &&
    mv -f "$dest.rayrig-new" "$dest" || exit 1
if [ "$import" = rpm ]; then
    rpm --import "$dest" || exit 1
fi
