//go:build tools

// Package tools pins the Helm client the chart tests run (see hack/README.md).
package tools

import _ "helm.sh/helm/v3/cmd/helm"
