#!/usr/bin/env bash
# Build the serving image (the repository's Dockerfile) with podman on a machine that reaches no image registry:
#   1. a Debian base made here: debootstrap (minbase) -> tar -> `podman import`   (skipped when it already exists)
#   2. `podman build` of the Dockerfile on it, with the CPU onnxruntime            (layers cached between runs)
#
#   sudo scripts/build_image.sh --install-deps      # first apt-get install what building and running need
#   sudo scripts/build_image.sh                     # -> localhost/electric-serve:cpu
#   export CONTAINERS_CONF="$PWD/scripts/containers.conf"
#   podman run --rm -p 8000:8000 -p 50051:50051 -v "$PWD/models/scorer:/models:ro" localhost/electric-serve:cpu
#   scripts/build_image.sh --check                  # only say whether building and running can work here
#
# Needs: root (debootstrap, and podman's default rootful storage); Debian's podman, runc, conmon and debootstrap to
# build; netavark, aardvark-dns and iptables (its iptables and ip6tables) to run with published ports (`-p`), else
# `podman run -p` fails with "netavark: No such file or directory (os error 2)". Each is checked before anything
# is built, and what is missing is named in one line. The network to deb.debian.org (debootstrap, apt-get in the
# build) and to PyPI (pip in the build).
# podman runs with scripts/containers.conf (runc, ulimits the machine allows, netavark, no systemd) unless
# CONTAINERS_CONF is set; set it the same way for your own podman commands. PODMAN_HELPER_DIRS (colon-separated)
# is where netavark and aardvark-dns are looked for when podman's helper_binaries_dir is not its default.
# The machine's CA bundle goes into the build as the secret `pip_ca` (never into a layer), so that pip works where
# TLS passes through a proxy that re-signs it. Large artefacts (the rootfs) live under --work, git-ignored runs/.
# docs/scale.md "The container image" has what this gave here.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
TAG=localhost/electric-serve:cpu
BASE_TAG=localhost/electric-base:bookworm
SUITE=bookworm
MIRROR=http://deb.debian.org/debian
WORK="$REPO/runs/image"
ORT_PACKAGE=onnxruntime
INSTALL_DEPS=0
CHECK_ONLY=0
REBUILD_BASE=0
CA_FILE=""

usage() {
    cat <<EOF
usage: $0 [options]
  --tag NAME          the image to build (default $TAG)
  --base-tag NAME     the Debian base image (default $BASE_TAG; made by debootstrap when missing)
  --suite NAME        Debian release of the base (default $SUITE; its python3 must be >= 3.10)
  --mirror URL        Debian mirror for debootstrap and the base's apt sources (default $MIRROR)
  --work DIR          where the base's rootfs is made, then removed (default runs/image)
  --ort-package REQ   ONNX Runtime requirement (default $ORT_PACKAGE; onnxruntime-gpu needs a CUDA base)
  --ca-file FILE      CA bundle for pip in the build (default: \$PIP_CERT, \$REQUESTS_CA_BUNDLE, \$SSL_CERT_FILE
                      or /etc/ssl/certs/ca-certificates.crt, the first that exists)
  --rebuild-base      make the base again even if it exists
  --install-deps      apt-get install what building and running need first (podman, runc, conmon, debootstrap,
                      netavark, aardvark-dns, iptables)
  --check             only check that building and running can work here: exit 0, or 1 naming what is missing
EOF
}

while [ $# -gt 0 ]; do
    case "$1" in
        --tag) TAG="$2"; shift 2 ;;
        --base-tag) BASE_TAG="$2"; shift 2 ;;
        --suite) SUITE="$2"; shift 2 ;;
        --mirror) MIRROR="$2"; shift 2 ;;
        --work) WORK="$2"; shift 2 ;;
        --ort-package) ORT_PACKAGE="$2"; shift 2 ;;
        --ca-file) CA_FILE="$2"; shift 2 ;;
        --rebuild-base) REBUILD_BASE=1; shift ;;
        --install-deps) INSTALL_DEPS=1; shift ;;
        --check) CHECK_ONLY=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done

log() { printf '[build_image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'build_image: %s\n' "$*" >&2; exit 1; }

# ---- tools ------------------------------------------------------------------------------------------------------
# command -> Debian package. podman finds netavark and aardvark-dns in its helper directories (containers.conf
# helper_binaries_dir, these by default), not on PATH; netavark runs iptables and ip6tables from PATH.
declare -A PACKAGE_OF=([podman]=podman [runc]=runc [conmon]=conmon [debootstrap]=debootstrap [netavark]=netavark
                       [aardvark-dns]=aardvark-dns [iptables]=iptables [ip6tables]=iptables)
HELPER_DIRS="${PODMAN_HELPER_DIRS:-/usr/local/libexec/podman:/usr/local/lib/podman:/usr/libexec/podman:/usr/lib/podman}"

# The one line saying what building and running the image lack and how to get it (empty when nothing is missing).
missing_tools() {
    local cmd dir dirs found missing=() packages=()
    for cmd in podman runc conmon debootstrap netavark aardvark-dns iptables ip6tables; do
        found=0
        if [ "$cmd" = netavark ] || [ "$cmd" = aardvark-dns ]; then
            IFS=: read -ra dirs <<<"$HELPER_DIRS"
            for dir in "${dirs[@]}"; do [ -x "$dir/$cmd" ] && found=1 && break; done
        else
            command -v "$cmd" >/dev/null 2>&1 && found=1
        fi
        if [ "$found" = 0 ]; then
            missing+=("$cmd")
            [[ " ${packages[*]} " == *" ${PACKAGE_OF[$cmd]} "* ]] || packages+=("${PACKAGE_OF[$cmd]}")
        fi
    done
    local listed="${missing[*]}"
    [ ${#missing[@]} -eq 0 ] || printf 'podman cannot build and run the image here: missing %s (apt-get install %s, or scripts/build_image.sh --install-deps)' \
        "${listed// /, }" "${packages[*]}"
}

if [ "$CHECK_ONLY" = 1 ]; then
    why="$(missing_tools)"
    [ -z "$why" ] || die "$why"
    printf 'build_image: podman, runc, conmon, debootstrap, netavark, aardvark-dns, iptables, ip6tables found\n'
    exit 0
fi
[ "$(id -u)" = 0 ] || die "run as root: debootstrap needs it, and the base is imported into rootful podman storage"
why="$(missing_tools)"
if [ -n "$why" ] && [ "$INSTALL_DEPS" = 1 ]; then
    log "installing podman, runc, conmon, debootstrap, netavark, aardvark-dns, iptables with apt-get"
    apt-get update -q
    # uidmap, slirp4netns and catatonit: what podman recommends for rootless use and --init; harmless as root
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        podman runc conmon debootstrap netavark aardvark-dns iptables uidmap slirp4netns catatonit
    why="$(missing_tools)"
fi
[ -z "$why" ] || die "$why"

# one build at a time (two test runs on one machine would otherwise debootstrap into the same directory)
mkdir -p "$WORK"
exec 9>"$WORK/.lock"
flock 9

export CONTAINERS_CONF="${CONTAINERS_CONF:-$REPO/scripts/containers.conf}"
log "podman $(podman --version | awk '{print $3}'), CONTAINERS_CONF=$CONTAINERS_CONF"

# ---- 1. the Debian base ------------------------------------------------------------------------------------------
if [ "$REBUILD_BASE" = 1 ] || ! podman image exists "$BASE_TAG"; then
    rootfs="$WORK/rootfs-$SUITE"
    rm -rf "$rootfs"
    mkdir -p "$WORK"
    log "debootstrap --variant=minbase $SUITE from $MIRROR into $rootfs"
    start=$SECONDS
    debootstrap --variant=minbase "$SUITE" "$rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
        || { tail -20 "$WORK/debootstrap.log" >&2; die "debootstrap failed (full log: $WORK/debootstrap.log)"; }
    # apt in the image gets the release's updates and security fixes too; no package lists or .debs are kept
    cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb http://deb.debian.org/debian-security $SUITE-security main
EOF
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/log/*.log
    log "debootstrap took $((SECONDS - start)) s; importing as $BASE_TAG"
    tar -C "$rootfs" --numeric-owner -cf - . \
        | podman import --change 'CMD ["/bin/bash"]' --message "debootstrap --variant=minbase $SUITE" - "$BASE_TAG" >/dev/null
    rm -rf "$rootfs"
else
    log "base $BASE_TAG exists (--rebuild-base to make it again)"
fi

# ---- 2. the image ------------------------------------------------------------------------------------------------
if [ -z "$CA_FILE" ]; then
    for f in "${PIP_CERT:-}" "${REQUESTS_CA_BUNDLE:-}" "${SSL_CERT_FILE:-}" /etc/ssl/certs/ca-certificates.crt; do
        if [ -n "$f" ] && [ -f "$f" ]; then CA_FILE="$f"; break; fi
    done
fi
ca_args=()
if [ -n "$CA_FILE" ]; then
    [ -f "$CA_FILE" ] || die "--ca-file $CA_FILE does not exist"
    ca_args=(--secret "id=pip_ca,src=$CA_FILE")
fi

log "podman build $TAG on $BASE_TAG with $ORT_PACKAGE${CA_FILE:+ (pip CA: $CA_FILE)}"
start=$SECONDS
# --format docker: the OCI format has no HEALTHCHECK and podman would drop it.
# --pull=never: the base is local and no registry is reachable. --network host: apt and pip reach their
# mirrors the way this machine does.
podman build --format docker --pull=never --network host \
    --build-arg "BASE_IMAGE=$BASE_TAG" --build-arg "ORT_PACKAGE=$ORT_PACKAGE" \
    "${ca_args[@]}" -t "$TAG" -f "$REPO/Dockerfile" "$REPO"
log "built $TAG in $((SECONDS - start)) s: $(podman image inspect --format '{{.Size}}' "$TAG" \
    | awk '{printf "%.0f MB", $1 / 1e6}')"
log "run it: CONTAINERS_CONF=$CONTAINERS_CONF podman run --rm -p 8000:8000 -p 50051:50051 -v \"\$PWD/models/scorer:/models:ro\" $TAG"
