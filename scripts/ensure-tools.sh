#!/usr/bin/env bash
# Installs, idempotently, every tool the test suite needs, so a clean clone passes:
# Debian packages (bubblewrap, an OCI registry, umoci) and the control-plane binaries
# built from the Go module proxy. Run by `npm test` (pretest) and by `npm start` when root.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bash "$here/install-debian.sh"
bash "$here/build-local-helper.sh"
if [ -f "$here/build-control-plane.sh" ]; then
  bash "$here/build-control-plane.sh"
fi
bash "$here/build-pulumi.sh"
