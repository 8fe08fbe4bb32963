#!/usr/bin/env bash
# Builds the Pulumi engine the deploy suite drives (tools/deploy/engine.ts), from the Go module
# proxy: the `pulumi` CLI (tools/pulumi/cli) and the Kubernetes resource provider plugin
# (tools/pulumi/provider), installed in a PULUMI_HOME of its own so the engine never downloads.
# The Node.js language host is not on the proxy; the driver runs our program inline instead.
#
# Output: .cache/pulumi/<cli version>/ (or $SBX_PULUMI_DIR):
#   bin/pulumi                                                 the CLI (PulumiCommand root)
#   home/plugins/resource-kubernetes-v<version>/pulumi-resource-kubernetes
# Idempotent: each binary has a stamp keyed on its wrapper module, this script and the Go
# version, and a machine-wide store (SBX_PULUMI_SHARED_CACHE, "" turns it off) lets another
# checkout copy instead of rebuilding. SBX_PULUMI_BUILD=0 skips the whole build (docs/deploy.md).
set -euo pipefail

if [ "${SBX_PULUMI_BUILD:-1}" = 0 ]; then
  echo "sbx: SBX_PULUMI_BUILD=0: not building the Pulumi engine (the deploy tests will say how to)" >&2
  exit 0
fi

repo="$(cd "$(dirname "$0")/.." && pwd)"
src="$repo/tools/pulumi"

if ! command -v go >/dev/null 2>&1; then
  for candidate in /usr/local/go/bin /usr/lib/go/bin; do
    [ -x "$candidate/go" ] && PATH="$candidate:$PATH"
  done
fi
if ! command -v go >/dev/null 2>&1; then
  echo "sbx: the Go toolchain (>= 1.25) is needed to build the Pulumi engine but 'go' is not on PATH." >&2
  echo "     Install it from https://go.dev/dl (e.g. /usr/local/go) and put its bin/ on PATH," >&2
  echo "     or set SBX_PULUMI_BUILD=0 to skip it (the deploy tests then fail, saying so)." >&2
  exit 1
fi
go_minor="$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')"
if [ "${go_minor:-0}" -lt 25 ]; then
  echo "sbx: Go $(go env GOVERSION) is too old to build Pulumi 3.248; install Go >= 1.25 (https://go.dev/dl)." >&2
  exit 1
fi

# The version of module $2 in go.mod $1, whether written `require m v` or inside a block.
module_version() {
  awk -v m="$2" '{ for (i = 1; i < NF; i++) if ($i == m && $(i + 1) ~ /^v[0-9]/) { print $(i + 1); exit } }' "$1"
}
cli_version="$(module_version "$src/cli/go.mod" github.com/pulumi/pulumi/pkg/v3)"
provider_module=github.com/pulumi/pulumi-kubernetes/provider/v4
# The plugin is installed under the version @pulumi/kubernetes asks the engine for; a plugin
# at another version would make the engine try to download that one.
k8s_package="$repo/node_modules/@pulumi/kubernetes/package.json"
if [ ! -f "$k8s_package" ]; then
  echo "sbx: $k8s_package is missing: run 'npm ci' first (the plugin version comes from it)." >&2
  exit 1
fi
provider_version="$(node -p "require(process.argv[1]).pulumi.version" "$k8s_package")"
out="${SBX_PULUMI_DIR:-$repo/.cache/pulumi/$cli_version}"
plugin_dir="$out/home/plugins/resource-kubernetes-v$provider_version"

export CGO_ENABLED=0
script_sum="$(sha256sum "$0" | cut -d' ' -f1)"
go_version="$(go env GOVERSION)"
mkdir -p "$out/bin" "$plugin_dir"
# Several checkouts/test runs may call this at once: one builds, the others wait for it.
exec 9>"$out/.lock"
flock 9
staging="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$staging"' EXIT
started=$SECONDS
built_any=0

shared="${SBX_PULUMI_SHARED_CACHE-${XDG_CACHE_HOME:-$HOME/.cache}/sbx/pulumi}"
shared_dir() { echo "$shared/$1-$(echo "$2" | sha256sum | cut -c1-24)"; }
sum() { cat "$@" | sha256sum | cut -d' ' -f1; }

# fresh NAME KEY TARGET: the binary exists and its stamp (.stamp-NAME) matches KEY.
fresh() { [ -x "$3" ] && [ -f "$out/.stamp-$1" ] && [ "$(cat "$out/.stamp-$1")" = "$2" ]; }
# from_shared NAME KEY: stages the binary a build elsewhere stored under KEY.
from_shared() {
  [ -n "$shared" ] || return 1
  local d
  d="$(shared_dir "$1" "$2")"
  [ -x "$d/$1" ] || return 1
  cp -l "$d/$1" "$staging/$1" 2>/dev/null || cp "$d/$1" "$staging/$1"
  echo "sbx: reusing $1 from $d" >&2
}
# publish NAME KEY: stores the freshly built binary under KEY (rename, so readers never see half).
publish() {
  [ -n "$shared" ] || return 0
  local d tmp
  d="$(shared_dir "$1" "$2")"
  mkdir -p "$shared"
  tmp="$(mktemp -d "$shared/.tmp.XXXXXX")"
  cp "$staging/$1" "$tmp/$1"
  rm -rf "$d"
  mv "$tmp" "$d" || rm -rf "$tmp"
}
# install NAME KEY TARGET: moves the staged binary into place, then stamps.
install() {
  rm -f "$3"
  mv "$staging/$1" "$3"
  echo "$2" >"$out/.stamp-$1"
  built_any=1
}

# The CLI. The version is stamped in: `pulumi version` otherwise prints v3.0.0-dev and the
# Automation API refuses it as older than the SDK.
cli_key="$(sum "$src/cli/go.mod" "$src/cli/go.sum")-$script_sum-$go_version"
if ! fresh pulumi "$cli_key" "$out/bin/pulumi" && ! from_shared pulumi "$cli_key"; then
  echo "sbx: building the Pulumi CLI $cli_version into $out (cold: ~6 minutes on 2 cores)" >&2
  (cd "$src/cli" && go build -p 2 -trimpath -o "$staging/pulumi" \
    -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$cli_version" \
    github.com/pulumi/pulumi/pkg/v3/cmd/pulumi)
  publish pulumi "$cli_key"
fi
[ -e "$staging/pulumi" ] && install pulumi "$cli_key" "$out/bin/pulumi"

# The provider. Its module zip lacks the schema-embed.json and terraform-mapping-embed.json
# that main.go embeds (upstream generates them at release time), so we build a writable copy
# with them made from the shipped schema.json / terraform-mapping.json, through a replace
# added to a staged copy of the wrapper module (the repo's go.mod stays path-free).
provider_binary=pulumi-resource-kubernetes
provider_key="$(sum "$src/provider/go.mod" "$src/provider/go.sum")-$provider_version-$script_sum-$go_version"
if ! fresh "$provider_binary" "$provider_key" "$plugin_dir/$provider_binary" &&
  ! from_shared "$provider_binary" "$provider_key"; then
  echo "sbx: building the Kubernetes provider plugin v$provider_version (cold: ~12 minutes on 2 cores)" >&2
  module_dir="$(cd "$src/provider" && go mod download -json "$provider_module" |
    node -e 'let s = ""; process.stdin.on("data", (c) => (s += c)).on("end", () => console.log(JSON.parse(s).Dir))')"
  cp -r "$module_dir" "$staging/provider-src"
  chmod -R u+w "$staging/provider-src"
  node - "$staging/provider-src/cmd/$provider_binary" "$provider_version" <<'EOF'
// The release build's schema carries the plugin version; the mapping is only compacted.
const fs = require("node:fs");
const path = require("node:path");
const [dir, version] = process.argv.slice(2);
const read = (f) => JSON.parse(fs.readFileSync(path.join(dir, f), "utf8"));
fs.writeFileSync(path.join(dir, "schema-embed.json"), JSON.stringify({ ...read("schema.json"), version }));
fs.writeFileSync(path.join(dir, "terraform-mapping-embed.json"), JSON.stringify(read("terraform-mapping.json")));
EOF
  mkdir "$staging/wrap"
  cp "$src/provider/go.mod" "$src/provider/go.sum" "$src/provider/tools.go" "$staging/wrap/"
  (cd "$staging/wrap" && go mod edit -replace "$provider_module=$staging/provider-src" &&
    go build -p 2 -trimpath -o "$staging/$provider_binary" \
      -ldflags "-s -w -X $provider_module/pkg/version.Version=$provider_version" \
      "$provider_module/cmd/$provider_binary")
  publish "$provider_binary" "$provider_key"
fi
if [ -e "$staging/$provider_binary" ]; then
  install "$provider_binary" "$provider_key" "$plugin_dir/$provider_binary"
  # A plugin folder with a .partial marker is one the engine is still installing: never leave one.
  rm -f "$plugin_dir.partial"
fi

# The policy-pack host (a shell script of ours, see its header): copied every run, it is tiny.
analyzer_dir="$out/home/plugins/analyzer-policy-nodejs-$cli_version"
mkdir -p "$analyzer_dir"
cp "$src/analyzer/pulumi-analyzer-policy-nodejs" "$analyzer_dir/.new"
mv "$analyzer_dir/.new" "$analyzer_dir/pulumi-analyzer-policy-nodejs"

if [ "$built_any" = 1 ]; then
  echo "sbx: Pulumi engine ready in $out ($((SECONDS - started))s)" >&2
fi
