#!/bin/sh
# Regenerates the certificates, keys and PKCS#12 archives these tests read (OpenSSL 3).
# The expected outputs (*.expected) were printed by ESO v2.9's own template functions, run
# from a Go harness; after regenerating, print them again the same way.
set -eu
cd "$(dirname "$0")"
days=36500

openssl ecparam -name prime256v1 -genkey -noout -out root.key
openssl req -x509 -new -key root.key -subj "/C=DE/O=Example, Inc./CN=Example Root" \
  -days $days -out root.crt

openssl ecparam -name prime256v1 -genkey -noout -out inter.key
openssl req -new -key inter.key -subj "/CN=Example Intermediate/O=Example/OU=Ops/OU=Dev" -out inter.csr
printf 'basicConstraints=critical,CA:TRUE\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n' > ca.ext
openssl x509 -req -in inter.csr -CA root.crt -CAkey root.key -CAcreateserial -days $days \
  -extfile ca.ext -out inter.crt

openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out leaf.key
openssl pkey -in leaf.key -traditional -out leaf-pkcs1.key
openssl req -new -key leaf.key -subj "/CN=app.example.com/emailAddress=ops@example.com" -out leaf.csr
printf 'subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\nsubjectAltName=DNS:app.example.com,DNS:*.app.example.com,IP:10.0.0.1,IP:2001:db8::1,IP:::ffff:192.0.2.7,email:ops@example.com,URI:spiffe://example.org/app\n' > leaf.ext
openssl x509 -req -in leaf.csr -CA inter.crt -CAkey inter.key -CAcreateserial -days $days \
  -extfile leaf.ext -out leaf.crt

openssl ecparam -name secp384r1 -genkey -noout -out ec.key
openssl req -x509 -new -key ec.key -subj "/CN=ec" -days $days -out ec.crt

openssl genpkey -algorithm ed25519 -out ed25519.key
openssl ecparam -name secp521r1 -genkey -noout -out p521.key

cat leaf.crt inter.crt root.crt > chain.pem
cat root.crt leaf.crt inter.crt > shuffled.pem

openssl pkcs12 -export -inkey leaf.key -in leaf.crt -certfile inter.crt -passout pass:s3cret -out leaf-pass.p12
openssl pkcs12 -export -inkey leaf.key -in leaf.crt -passout pass: -out leaf-nopass.p12
openssl pkcs12 -export -legacy -inkey ec.key -in ec.crt -passout pass:legacy -out ec-legacy.p12

rm -f ./*.csr ./*.srl ./*.ext
