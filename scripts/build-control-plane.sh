#!/usr/bin/env bash
# Builds the Kubernetes control plane the `k8s` test project runs against, from the Go
# module proxy (no GitHub downloads, no container images): kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl (k8s.io/kubernetes), etcd (etcd 3.6
# server), kwok (simulated nodes) and sbx-kubelet (our exec/logs stand-in for the nodes).
#
# Output: .cache/control-plane/<k8s version>/bin, or $SBX_CONTROL_PLANE_BIN.
# Binaries found in $KUBEBUILDER_ASSETS (the envtest convention: etcd, kube-apiserver,
# kubectl) are linked instead of built. Idempotent: each group (Kubernetes+etcd, sbx-kubelet,
# kwok) has a stamp keyed on its module files, its sources, this script and the Go version,
# and is skipped when nothing changed.
# Versions are bumped in tools/control-plane/go.mod (and kwok/go.mod), nowhere else.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
src="$repo/tools/control-plane"

if ! command -v go >/dev/null 2>&1; then
  for candidate in /usr/local/go/bin /usr/lib/go/bin; do
    [ -x "$candidate/go" ] && PATH="$candidate:$PATH"
  done
fi
if ! command -v go >/dev/null 2>&1; then
  echo "sbx: the Go toolchain (>= 1.25) is needed to build the test control plane but 'go' is not on PATH." >&2
  echo "     Install it from https://go.dev/dl (e.g. /usr/local/go) and put its bin/ on PATH, or point" >&2
  echo "     KUBEBUILDER_ASSETS/SBX_CONTROL_PLANE_BIN at prebuilt binaries (docs/control-plane.md)." >&2
  exit 1
fi
go_minor="$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')"
if [ "${go_minor:-0}" -lt 25 ]; then
  echo "sbx: Go $(go env GOVERSION) is too old to build Kubernetes 1.35; install Go >= 1.25 (https://go.dev/dl)." >&2
  exit 1
fi

# The version of module $2 in go.mod $1, whether written `require m v` or inside a block.
module_version() {
  awk -v m="$2" '{ for (i = 1; i < NF; i++) if ($i == m && $(i + 1) ~ /^v[0-9]/) { print $(i + 1); exit } }' "$1"
}
k8s_version="$(module_version "$src/go.mod" k8s.io/kubernetes)"
etcd_version="$(module_version "$src/go.mod" go.etcd.io/etcd/server/v3)"
kwok_version="$(module_version "$src/kwok/go.mod" sigs.k8s.io/kwok)"
bin="${SBX_CONTROL_PLANE_BIN:-$repo/.cache/control-plane/$k8s_version/bin}"

export CGO_ENABLED=0
k8s_tools=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
script_sum="$(sha256sum "$0" | cut -d' ' -f1)"
go_version="$(go env GOVERSION)"
mkdir -p "$bin"
# Several checkouts/test runs may call this at once: one builds, the others wait for it.
exec 9>"$bin/.lock"
flock 9
staging="$(mktemp -d "$bin/.build.XXXXXX")"
trap 'rm -rf "$staging"' EXIT
built_any=0
started=$SECONDS

# fresh GROUP KEY BINARIES...: true when every binary exists and the group's stamp
# (.stamp-GROUP) matches KEY, so that group is skipped.
fresh() {
  local group="$1" key="$2"
  shift 2
  for b in "$@"; do [ -x "$bin/$b" ] || return 1; done
  [ -f "$bin/.stamp-$group" ] && [ "$(cat "$bin/.stamp-$group")" = "$key" ]
}
# install GROUP KEY BINARIES...: moves the staged binaries into place, then stamps.
install() {
  local group="$1" key="$2"
  shift 2
  for b in "$@"; do
    rm -f "$bin/$b"
    mv "$staging/$b" "$bin/$b"
  done
  echo "$key" > "$bin/.stamp-$group"
  built_any=1
}
# A machine-wide store of built binaries, keyed like the stamps, so another checkout of the
# same sources (CI's fresh clone) copies them instead of relinking for minutes.
# SBX_CONTROL_PLANE_SHARED_CACHE="" turns it off.
shared="${SBX_CONTROL_PLANE_SHARED_CACHE-${XDG_CACHE_HOME:-$HOME/.cache}/sbx/control-plane}"
shared_dir() { echo "$shared/$1-$(echo "$2" | sha256sum | cut -c1-24)"; }
# from_shared GROUP KEY BINARIES...: stages the binaries a build elsewhere stored under KEY.
from_shared() {
  [ -n "$shared" ] || return 1
  local d
  d="$(shared_dir "$1" "$2")"
  shift 2
  for b in "$@"; do [ -x "$d/$b" ] && [ ! -L "$d/$b" ] || return 1; done
  for b in "$@"; do cp -l "$d/$b" "$staging/$b" 2>/dev/null || cp "$d/$b" "$staging/$b"; done
  echo "sbx: reusing $* from $d" >&2
}
# publish GROUP KEY BINARIES...: stores freshly built (not symlinked) binaries under KEY.
publish() {
  [ -n "$shared" ] || return 0
  local d tmp
  d="$(shared_dir "$1" "$2")"
  shift 2
  for b in "$@"; do [ -L "$staging/$b" ] && return 0; done
  mkdir -p "$shared"
  tmp="$(mktemp -d "$shared/.tmp.XXXXXX")"
  for b in "$@"; do cp "$staging/$b" "$tmp/$b"; done
  rm -rf "$d"
  mv "$tmp" "$d" || rm -rf "$tmp"
}
announce() {
  [ -n "${announced:-}" ] && return 0
  announced=1
  echo "sbx: building the test control plane into $bin (cold: ~12 minutes on 2 cores; the Go build cache makes rebuilds fast)" >&2
}
sum() { cat "$@" | sha256sum | cut -d' ' -f1; }

# Kubernetes and etcd: keyed on the wrapper module. Binaries that KUBEBUILDER_ASSETS
# provides (the envtest convention: etcd, kube-apiserver, kubectl) are linked, not built.
k8s_key="$(sum "$src/go.mod" "$src/go.sum" "$src/cmd/etcd/main.go")-$script_sum-$go_version-assets=${KUBEBUILDER_ASSETS:-}"
if ! fresh k8s "$k8s_key" "${k8s_tools[@]}" etcd && ! from_shared k8s "$k8s_key" "${k8s_tools[@]}" etcd; then
  announce
  echo "sbx: Kubernetes $k8s_version and etcd $etcd_version" >&2
  prebuilt=()
  if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
    for b in "${k8s_tools[@]}" etcd; do
      if [ -x "$KUBEBUILDER_ASSETS/$b" ]; then
        ln -sf "$(cd "$KUBEBUILDER_ASSETS" && pwd)/$b" "$staging/$b"
        prebuilt+=("$b")
      fi
    done
    echo "sbx: reusing from KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS: ${prebuilt[*]:-nothing}" >&2
  fi
  is_prebuilt() { [[ " ${prebuilt[*]:-} " == *" $1 "* ]]; }
  build_date="$(cd "$src" && go list -m -f '{{.Time.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)"
  minor="$(echo "$k8s_version" | cut -d. -f2)"
  k8s_ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    k8s_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
  done
  pkgs=()
  for b in "${k8s_tools[@]}"; do is_prebuilt "$b" || pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  if [ ${#pkgs[@]} -gt 0 ]; then
    (cd "$src" && go build -p 2 -trimpath -ldflags "$k8s_ldflags" -o "$staging/" "${pkgs[@]}")
  fi
  if ! is_prebuilt etcd; then
    (cd "$src" && go build -p 2 -trimpath -o "$staging/etcd" \
      -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-$etcd_version" ./cmd/etcd)
  fi
  publish k8s "$k8s_key" "${k8s_tools[@]}" etcd
fi
[ -e "$staging/etcd" ] && install k8s "$k8s_key" "${k8s_tools[@]}" etcd

# sbx-kubelet: our exec/logs stand-in, keyed on its sources as well.
kubelet_key="$(sum "$src/go.mod" "$src/go.sum" $(find "$src/cmd/sbx-kubelet" -name '*.go' | LC_ALL=C sort))-$script_sum-$go_version"
if ! fresh sbx-kubelet "$kubelet_key" sbx-kubelet && ! from_shared sbx-kubelet "$kubelet_key" sbx-kubelet; then
  announce
  (cd "$src" && go build -p 2 -trimpath -o "$staging/sbx-kubelet" \
    -ldflags "-s -w -X main.version=$k8s_version-${kubelet_key:0:12}" ./cmd/sbx-kubelet)
  publish sbx-kubelet "$kubelet_key" sbx-kubelet
fi
[ -e "$staging/sbx-kubelet" ] && install sbx-kubelet "$kubelet_key" sbx-kubelet

# kwok: its own module (it tracks a newer k8s.io library line).
kwok_key="$(sum "$src/kwok/go.mod" "$src/kwok/go.sum")-$script_sum-$go_version"
if ! fresh kwok "$kwok_key" kwok && ! from_shared kwok "$kwok_key" kwok; then
  announce
  echo "sbx: kwok $kwok_version" >&2
  (cd "$src/kwok" && go build -p 2 -trimpath -o "$staging/kwok" \
    -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${kwok_version#v} -X sigs.k8s.io/kwok/pkg/consts.PreRelease=GA" \
    sigs.k8s.io/kwok/cmd/kwok)
  publish kwok "$kwok_key" kwok
fi
[ -e "$staging/kwok" ] && install kwok "$kwok_key" kwok

if [ "$built_any" = 1 ]; then
  echo "sbx: control plane ready in $bin ($((SECONDS - started))s)" >&2
fi
