module external-secrets-rs.invalid/hack/template-golden

go 1.26

require (
	github.com/Masterminds/sprig/v3 v3.3.0
	gopkg.in/yaml.v3 v3.0.1
)

// Sprig's dependencies at the versions ESO itself builds with (its runtime/go.mod), which
// are newer than sprig v3.3.0 asks for; cast and semver decide conversions and comparisons.
require (
	dario.cat/mergo v1.0.2 // indirect
	github.com/Masterminds/goutils v1.1.1 // indirect
	github.com/Masterminds/semver/v3 v3.4.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/huandu/xstrings v1.5.0 // indirect
	github.com/mitchellh/copystructure v1.2.0 // indirect
	github.com/mitchellh/reflectwalk v1.0.2 // indirect
	github.com/shopspring/decimal v1.4.0 // indirect
	github.com/spf13/cast v1.10.0 // indirect
	golang.org/x/crypto v0.53.0 // indirect
)
