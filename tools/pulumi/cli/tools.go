//go:build tools

// Package tools pins the Pulumi CLI built by scripts/build-pulumi.sh, so `go mod tidy`
// keeps its dependencies in go.sum.
package tools

import _ "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
