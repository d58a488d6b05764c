//go:build tools

// Package tools pins the HashiCorp Vault server the tests run as a fixture (see hack/README.md).
package tools

import _ "github.com/hashicorp/vault"
