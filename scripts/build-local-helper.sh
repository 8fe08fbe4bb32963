#!/usr/bin/env bash
# Builds the in-sandbox helper (tools/local-helper/sbx-helper.c, the seccomp filter in seccomp.c,
# the Kubernetes command channel: channel.c, daemon.c, registry.c, ring.c, and the pod's own
# snapshot layer transfers: blob.c, sha256.c) into
# .cache/local/sbx-helper, statically linked so it also runs inside OCI image rootfs and pods
# that have no glibc. Idempotent: rebuilds only when the sha256 of the sources and of this
# script changed (runtime/local/helperBinary.ts computes the same stamp; keep the
# list and its order in step). Needs gcc and libc6-dev.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$root/tools/local-helper"
sources=("$dir/sbx-helper.c" "$dir/seccomp.c" "$dir/seccomp.h" "$dir/port-relay.c" "$dir/port-relay.h" "$dir/channel.c" "$dir/channel.h" "$dir/daemon.c" "$dir/registry.c" "$dir/registry.h" "$dir/ring.c" "$dir/blob.c" "$dir/blob.h" "$dir/sha256.c" "$dir/sha256.h" "$root/scripts/build-local-helper.sh")
out_dir="$root/.cache/local"
out="$out_dir/sbx-helper"
sum="$(cat "${sources[@]}" | sha256sum | cut -d' ' -f1)"
if [ -x "$out" ] && [ "$(cat "$out.sha256" 2>/dev/null)" = "$sum" ]; then
  exit 0
fi
if ! command -v gcc >/dev/null 2>&1; then
  echo "sbx: gcc not found; the local backend's helper is built from C. Install it: apt-get install -y gcc libc6-dev" >&2
  exit 1
fi
mkdir -p "$out_dir"
tmp="$(mktemp "$out_dir/sbx-helper.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
gcc -O2 -static -Wall -Wextra -Wno-unused-result -o "$tmp" "$dir/sbx-helper.c" "$dir/seccomp.c" "$dir/port-relay.c" "$dir/channel.c" "$dir/daemon.c" "$dir/registry.c" "$dir/ring.c" "$dir/blob.c" "$dir/sha256.c"
chmod 0755 "$tmp"
mv "$tmp" "$out"
echo "$sum" > "$out.sha256"
trap - EXIT
echo "sbx: built $out" >&2
