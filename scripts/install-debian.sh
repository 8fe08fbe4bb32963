#!/usr/bin/env bash
# Debian packages the local backend and the test suite use (chromium: the console's browser tests,
# test/console, drive it headless through playwright-core; no browser is downloaded). Idempotent: does nothing
# when every command is already there. Needs root (apt-get); otherwise says what to install.
set -euo pipefail
declare -A need=([bwrap]=bubblewrap [docker-registry]=docker-registry [umoci]=umoci [tar]=tar [ip]=iproute2 [gcc]=gcc [mkfs.ext4]=e2fsprogs [chromium]=chromium)
missing=()
for cmd in "${!need[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/bin/$cmd" ] || [ -x "/usr/sbin/$cmd" ] || [ -x "/sbin/$cmd" ] || missing+=("${need[$cmd]}")
done
# the local backend's helper is linked statically (scripts/build-local-helper.sh)
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || [ -f "/usr/lib/$(uname -m)-linux-gnu/libc.a" ] || missing+=(libc6-dev)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "sbx: missing tools; install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "sbx: installing Debian packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
