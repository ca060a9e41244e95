#!/usr/bin/env bash
# Build Tidemark's images with buildah and run them with podman, without a container daemon.
#
#   scripts/image.sh build          the base image (Dockerfile) and one image per component
#                                   (services/<name>/Dockerfile), unless built from the same inputs
#   scripts/image.sh podman ARGS    podman on the same image storage, e.g. `podman images`
#   scripts/image.sh buildah ARGS   buildah on it
#
# Images: localhost/tidemark:<version> and localhost/tidemark-<name>:<version> (the version of
# pyproject.toml), as `docker build` tags them in docs/operations.md, "The image".
#
# The base: PYTHON_IMAGE names it (the Dockerfile's build argument); unset, the Dockerfile's default
# (python:<version>-slim-bookworm) when it is in the storage or can be pulled, otherwise a Debian
# bookworm base made here with debootstrap from Debian's packages (Python 3.11, venv and pip), for
# machines that reach no image registry: localhost/tidemark-python-debian:bookworm, made once.
# It takes this machine's own CA certificates (/usr/local/share/ca-certificates) and points pip at
# the system's trust store, so that the build's downloads (PyPI, Maven Central, Debian) pass a
# TLS-inspecting proxy as the machine's own do.
#
# Cache: everything lives under IMAGE_CACHE_DIR (default ${XDG_CACHE_HOME:-~/.cache}/tidemark/image):
# the image storage, the storage and engine configuration (storage.conf, containers.conf) and the
# build logs. The images carry the label io.tidemark.inputs, a digest of the base image's id, the
# Dockerfiles, .dockerignore, this script and the build context (pyproject.toml, README.md,
# LICENSE, src/, schemas/, less what .dockerignore leaves out): `build` does nothing when every
# image carries the digest of the current inputs, so a fresh clone of the same commit reuses them.
#
# How it runs here (docs/operations.md, "The image"): buildah with chroot isolation and the host's
# name and network; the overlay storage driver where the kernel has overlayfs, else vfs; podman
# with runc and cgroupfs, and open-file and process limits no higher than this machine's (a
# container cannot raise them). Needs root; the packages come from
# `scripts/install-system-deps.sh image`.
set -euo pipefail
shopt -s inherit_errexit  # also inside $(...)

REPO=$(cd "$(dirname "$0")/.." && pwd)
SCRIPT="$REPO/scripts/image.sh"
CACHE=${IMAGE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tidemark/image}
DEBIAN_BASE=localhost/tidemark-python-debian:bookworm
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEBIAN_PACKAGES=python3,python3-venv,python3-pip,python-is-python3,ca-certificates,netbase
LOG="$CACHE/build.log"  # the last build's output
BASE_LOG="$CACHE/debootstrap.log"  # the Debian base's

say() { echo "image: $*"; }
fail() { echo "image: $*" >&2; exit 1; }

# standard input to file $1, which readers see whole (another call may be reading it)
write_atomically() {
    cat > "$1.$$" && mv -f "$1.$$" "$1"
}

# storage.conf and containers.conf in the cache, read by buildah and podman alike.
configure() {
    mkdir -p "$CACHE/storage" "$CACHE/run" "$CACHE/tmp"
    local driver=vfs
    if grep -qw overlay /proc/filesystems && [ "$(stat -f -c %T "$CACHE")" != overlayfs ]; then
        driver=overlay
    fi
    write_atomically "$CACHE/storage.conf" <<EOF
[storage]
driver = "$driver"
graphroot = "$CACHE/storage"
runroot = "$CACHE/run"
EOF
    local pid_max nproc
    pid_max=$(cat /proc/sys/kernel/pid_max)
    nproc=$(ulimit -Hu)
    if [ "$nproc" = unlimited ] || [ "$nproc" -gt "$pid_max" ]; then nproc=$pid_max; fi
    write_atomically "$CACHE/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$(ulimit -Hn):$(ulimit -Hn)", "nproc=$nproc:$nproc"]
log_driver = "k8s-file"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "$CACHE/tmp"
EOF
    export CONTAINERS_STORAGE_CONF="$CACHE/storage.conf" CONTAINERS_CONF="$CACHE/containers.conf"
}

# Docker's reading of an image name: python:3.11 is docker.io/library/python:3.11.
qualified() {
    local name=$1 first=${1%%/*}
    if [[ $name != */* ]]; then
        echo "docker.io/library/$name"
    elif [[ $first != *.* && $first != *:* && $first != localhost ]]; then
        echo "docker.io/$name"
    else
        echo "$name"
    fi
}

image_exists() { buildah inspect --type image "$1" >/dev/null 2>&1; }

label() { buildah inspect --type image --format "{{index .Docker.Config.Labels \"$2\"}}" "$1" 2>/dev/null || true; }

# The recipe of the Debian base: what debootstrap installs, and the CA certificates it takes.
debian_recipe() {
    { declare -f make_debian_base; echo "$DEBIAN_MIRROR $DEBIAN_PACKAGES"
      cat /usr/local/share/ca-certificates/*.crt 2>/dev/null || true; } | sha256sum | cut -c1-16
}

# A debootstrap root, and what a killed debootstrap left mounted in it (/proc, /sys).
remove_rootfs() {
    [ -n "$1" ] && [ "$1" != / ] || fail "remove_rootfs: no root given"
    local target
    for target in $(awk -v root="$1/" 'index($2, root) == 1 {print $2}' /proc/mounts | sort -r); do
        umount -l "$target"
    done
    rm -rf --one-file-system "$1"
}

make_debian_base() {
    local rootfs="$CACHE/debian-rootfs" recipe=$1 started=$SECONDS container mount
    remove_rootfs "$rootfs"
    say "making the Debian base $DEBIAN_BASE with debootstrap from $DEBIAN_MIRROR (output in $BASE_LOG)"
    debootstrap --variant=minbase --include="$DEBIAN_PACKAGES" bookworm "$rootfs" "$DEBIAN_MIRROR" >"$BASE_LOG" 2>&1 \
        || { tail -n 30 "$BASE_LOG" >&2; fail "debootstrap failed"; }
    # as Debian's slim images: no documentation, manual pages or translations, now or later
    cat > "$rootfs/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
    find "$rootfs/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
    rm -rf "$rootfs"/usr/share/{man,groff,info,lintian}/* "$rootfs"/var/cache/apt/*.bin \
        "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs/etc/apt/sources.list"
    find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
    cat > "$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $DEBIAN_MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${DEBIAN_MIRROR%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/" 2>/dev/null || true
    chroot "$rootfs" update-ca-certificates >>"$BASE_LOG" 2>&1
    printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > "$rootfs/etc/pip.conf"
    : > "$rootfs/etc/resolv.conf"
    echo localhost > "$rootfs/etc/hostname"
    container=$(buildah from scratch)
    mount=$(buildah mount "$container")
    tar -C "$rootfs" --numeric-owner -cf - . | tar -C "$mount" --numeric-owner -xpf -
    buildah umount "$container" >/dev/null
    buildah config --env LANG=C.UTF-8 --cmd '["python3"]' --label "io.tidemark.recipe=$recipe" "$container"
    buildah commit --rm --quiet --format docker --identity-label=false "$container" "$DEBIAN_BASE" >/dev/null
    remove_rootfs "$rootfs"
    say "made $DEBIAN_BASE in $((SECONDS - started)) s"
}

# The base image the build uses, pulled or made first when needed.
base_image() {
    if [ -n "${PYTHON_IMAGE:-}" ]; then
        local named; named=$(qualified "$PYTHON_IMAGE")
        image_exists "$named" || buildah pull --quiet "$named" >/dev/null || fail "cannot pull $named"
        echo "$named"
        return
    fi
    local default; default=$(qualified "$(sed -n 's/^ARG PYTHON_IMAGE=//p' "$REPO/Dockerfile")")
    if image_exists "$default" || timeout 120 buildah pull --quiet "$default" >/dev/null 2>&1; then
        echo "$default"
        return
    fi
    local recipe; recipe=$(debian_recipe)
    if [ "$(label "$DEBIAN_BASE" io.tidemark.recipe)" != "$recipe" ]; then
        say "$default cannot be pulled (no registry reachable)" >&2
        make_debian_base "$recipe" >&2
    fi
    echo "$DEBIAN_BASE"
}

# A digest of everything the images are built from (see the header).
inputs_digest() {
    local base_id=$1
    { echo "$base_id"
      cd "$REPO"
      find Dockerfile .dockerignore services scripts/image.sh pyproject.toml README.md LICENSE src schemas \
          \( -name __pycache__ -o -name '*.egg-info' \) -prune -o -type f ! -name '*.pyc' -print0 \
          | LC_ALL=C sort -z | xargs -0 sha256sum
      find src schemas -type l -printf '%p -> %l\n' | LC_ALL=C sort
    } | sha256sum | cut -c1-16
}

build() {
    [ "$(id -u)" -eq 0 ] || fail "needs root (debootstrap, buildah and podman as root)"
    for tool in buildah podman runc debootstrap; do
        command -v "$tool" >/dev/null || fail "$tool not found: run scripts/install-system-deps.sh image"
    done
    mkdir -p "$CACHE"
    exec 9>"$CACHE/lock"
    flock 9  # one build at a time on this machine
    local started=$SECONDS version base digest names=() name
    version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/pyproject.toml" | head -n 1)
    base=$(base_image)
    digest=$(inputs_digest "$(buildah inspect --type image --format '{{.FromImageID}}' "$base")")
    names=("localhost/tidemark:$version")
    for dockerfile in "$REPO"/services/*/Dockerfile; do
        name=$(basename "$(dirname "$dockerfile")")
        names+=("localhost/tidemark-$name:$version")
    done
    local stale=()
    for name in "${names[@]}"; do
        [ "$(label "$name" io.tidemark.inputs)" = "$digest" ] || stale+=("$name")
    done
    if [ "${#stale[@]}" -eq 0 ]; then
        say "up to date (inputs $digest, base $base): ${names[*]}"
        return
    fi
    buildah rm --all >/dev/null 2>&1 || true  # working containers a killed build left
    local flags=(--isolation chroot --network host --format docker --layers=false --force-rm --pull=never
                 --identity-label=false --label "io.tidemark.inputs=$digest")
    # Spark's driver (the class archive's training run) resolves its host's name: the host's, in /etc/hosts
    flags+=(--uts host --add-host "$(hostname):127.0.0.1")
    say "building ${names[0]} from Dockerfile on $base (output in $LOG; 3 to 10 minutes)"
    : > "$LOG"
    buildah bud "${flags[@]}" --build-arg "PYTHON_IMAGE=$base" -t "${names[0]}" -f "$REPO/Dockerfile" "$REPO" \
        >>"$LOG" 2>&1 || { tail -n 40 "$LOG" >&2; fail "building ${names[0]} failed"; }
    for dockerfile in "$REPO"/services/*/Dockerfile; do
        name=$(basename "$(dirname "$dockerfile")")
        say "building localhost/tidemark-$name:$version from services/$name/Dockerfile"
        buildah bud "${flags[@]}" --build-arg "TIDEMARK_IMAGE=${names[0]}" -t "localhost/tidemark-$name:$version" \
            "$(dirname "$dockerfile")" >>"$LOG" 2>&1 || { tail -n 40 "$LOG" >&2; fail "building $name failed"; }
    done
    buildah rmi --prune >/dev/null 2>&1 || true  # images of earlier inputs, now untagged
    say "built in $((SECONDS - started)) s (inputs $digest):"
    buildah images --format '{{.Name}}:{{.Tag}} {{.Size}}' | grep -E "^localhost/tidemark" | sed 's/^/  /'
}

configure
case "${1:-build}" in
    build) build ;;
    podman|buildah) tool=$1; shift; exec "$tool" "$@" ;;
    *) fail "usage: $SCRIPT [build | podman ARGS | buildah ARGS]" ;;
esac
