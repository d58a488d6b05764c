//go:build tools

// Package tools pins CoreDNS, the cluster DNS of the test node that hack/build-node.sh builds.
package tools

import (
	_ "github.com/coredns/coredns"
)
