#!/usr/bin/env bash
# Install the Debian packages Tidemark needs, when missing.
#
#   scripts/install-system-deps.sh demo   what `make demo` needs: Java and Maven
#   scripts/install-system-deps.sh        what `make test` needs: the first six below
#   scripts/install-system-deps.sh image  what `make image` and `make test-image` need: the last four
#
#   openjdk-17-jre-headless  Java 17 for PySpark and the embedded Apache Kafka broker
#   maven                    fetches Apache Kafka's broker jars from Maven Central (first broker start)
#   prometheus               the Prometheus server and promtool (monitoring tests, rule tests)
#   docker-compose           validates docker-compose.yml (`docker-compose config`)
#   chromium                 headless browser for the coordinator's checkpoints page test
#   postgresql               the PostgreSQL server the exactly-once PostgreSQL sink example's tests start
#                            (initdb and pg_ctl in a temporary directory, as a non-root user)
#   buildah                  builds the images from the Dockerfiles without a container daemon
#                            (scripts/image.sh)
#   podman                   runs containers from them without a daemon (the image test)
#   runc                     podman's container runtime here (Debian's default, crun, refuses
#                            the machine's hybrid cgroup hierarchy)
#   debootstrap              makes a Debian base image from Debian's packages when no image
#                            registry is reachable
#
# Idempotent: when every package is installed it only runs `dpkg-query` and exits 0.
# `apt-get update` runs only when something is missing. Exits non-zero with a message
# naming the packages when they cannot be installed (not root, no apt-get, apt failure).
set -euo pipefail

PACKAGES=(openjdk-17-jre-headless maven prometheus docker-compose chromium postgresql)
if [ "${1:-test}" = "demo" ]; then
    PACKAGES=(openjdk-17-jre-headless maven)
elif [ "${1:-test}" = "image" ]; then
    PACKAGES=(buildah podman runc debootstrap)
fi
LOG=${TIDEMARK_INSTALL_LOG:-/tmp/tidemark-system-deps.log}

is_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'
}

missing=()
for pkg in "${PACKAGES[@]}"; do
    is_installed "$pkg" || missing+=("$pkg")
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "system deps: all present (${PACKAGES[*]})"
    exit 0
fi

fail() {
    echo "system deps: cannot install ${missing[*]}: $1" >&2
    echo "system deps: install them by hand: apt-get install -y ${missing[*]}" >&2
    exit 1
}

command -v apt-get >/dev/null 2>&1 || fail "apt-get not found (not a Debian system?)"

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
    else
        fail "must run as root or with password-less sudo"
    fi
fi

export DEBIAN_FRONTEND=noninteractive
: > "$LOG"
echo "system deps: apt-get update (output in $LOG)"
"${SUDO[@]}" apt-get update -qq >>"$LOG" 2>&1 || { tail -n 20 "$LOG" >&2; fail "apt-get update failed"; }
echo "system deps: installing ${missing[*]} (output in $LOG)"
# --no-install-recommends keeps prometheus from pulling in its exporters and web assets.
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$LOG" 2>&1 \
    || { tail -n 20 "$LOG" >&2; fail "apt-get install failed"; }

# The Debian prometheus package starts a system service on install where an init system
# exists; Tidemark's tests start their own Prometheus on a free port and never need it.
for pkg in "${missing[@]}"; do
    is_installed "$pkg" || fail "$pkg still not installed after apt-get install"
done
echo "system deps: installed ${missing[*]}"
