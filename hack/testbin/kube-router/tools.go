//go:build tools

// Package tools pins the main package that hack/build-node.sh builds (only its network policy
// controller runs on the test node).
package tools

import _ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
