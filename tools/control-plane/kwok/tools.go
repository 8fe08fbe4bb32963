//go:build tools

// Package tools pins the kwok command built by scripts/build-control-plane.sh.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
