#!/usr/bin/env bash
# Install the Debian packages Tidemark's build and tests need, when missing.
#
#   openjdk-17-jre-headless  Java 17 for PySpark
#   prometheus               the Prometheus server and promtool (monitoring tests, rule tests)
#   docker-compose           validates docker-compose.yml (`docker-compose config`)
#
# Idempotent: when every package is installed it only runs `dpkg-query` and exits 0.
# `apt-get update` runs only when something is missing. Exits non-zero with a message
# naming the packages when they cannot be installed (not root, no apt-get, apt failure).
set -euo pipefail

PACKAGES=(openjdk-17-jre-headless prometheus docker-compose)

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

echo "system deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq || fail "apt-get update failed"
# --no-install-recommends keeps prometheus from pulling in its exporters and web assets.
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    || fail "apt-get install failed"

# The Debian prometheus package starts a system service on install where an init system
# exists; Tidemark's tests start their own Prometheus on a free port and never need it.
for pkg in "${missing[@]}"; do
    is_installed "$pkg" || fail "$pkg still not installed after apt-get install"
done
echo "system deps: installed ${missing[*]}"
