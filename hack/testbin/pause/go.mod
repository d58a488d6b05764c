module external-secrets-rs.invalid/testbin/pause

go 1.26.8
