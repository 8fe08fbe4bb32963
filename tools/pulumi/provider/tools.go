//go:build tools

// Package tools pins the Kubernetes resource provider built by scripts/build-pulumi.sh, so
// `go mod tidy` keeps its dependencies in go.sum.
package tools

import _ "github.com/pulumi/pulumi-kubernetes/provider/v4/cmd/pulumi-resource-kubernetes"
