// Command grpc-go-peer is a gRPC client written with grpc-go, the library ESO's core uses: it
// calls provider.v1.SecretStoreProvider/GetSecret on a server and prints, as one JSON object,
// the status code grpc-go reports and the details it decoded from grpc-status-details-bin. The
// tests run it against our provider server to see what ESO's core would see.
//
// It has no generated stubs: the request is three fields, encoded by hand, and the one detail
// it looks into (provider.v1.Error) is decoded the same way.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

const (
	getSecret    = "/provider.v1.SecretStoreProvider/GetSecret"
	providerErr  = "type.googleapis.com/provider.v1.Error"
	usageMessage = "grpc-go-peer --address HOST:PORT --tls-dir DIR --provider-ref API_VERSION/KIND/NAMESPACE/NAME --source-namespace NS --key KEY"
)

// raw passes messages through as the bytes they are.
type raw struct{}

func (raw) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (raw) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (raw) Name() string { return "proto" }

// Detail is one google.protobuf.Any of the status, and provider.v1.Error's fields when it is one.
type Detail struct {
	TypeURL   string            `json:"type_url"`
	Code      string            `json:"code,omitempty"`
	Message   string            `json:"message,omitempty"`
	Retryable bool              `json:"retryable,omitempty"`
	Details   map[string]string `json:"details,omitempty"`
}

// Outcome is what the program prints.
type Outcome struct {
	Code    string   `json:"code"`
	Message string   `json:"message"`
	Value   string   `json:"value,omitempty"`
	Details []Detail `json:"details"`
}

func main() {
	address := flag.String("address", "", "host:port of the server")
	tlsDir := flag.String("tls-dir", "", "folder with ca.crt, client.crt and client.key")
	reference := flag.String("provider-ref", "", "apiVersion/kind/namespace/name of the provider object (apiVersion may hold a slash)")
	namespace := flag.String("source-namespace", "", "source_namespace of the call")
	key := flag.String("key", "", "remote_ref.key to read")
	deadline := flag.Duration("deadline", 10*time.Second, "the call's deadline")
	flag.Parse()
	if *address == "" || *tlsDir == "" || *reference == "" || *key == "" {
		fmt.Fprintln(os.Stderr, usageMessage)
		os.Exit(2)
	}
	if err := run(*address, *tlsDir, *reference, *namespace, *key, *deadline); err != nil {
		fmt.Fprintln(os.Stderr, "grpc-go-peer:", err)
		os.Exit(1)
	}
}

func run(address, tlsDir, reference, namespace, key string, deadline time.Duration) error {
	request, err := encodeRequest(reference, namespace, key)
	if err != nil {
		return err
	}
	config, err := tlsConfig(tlsDir, address)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(credentials.NewTLS(config)))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var answer []byte
	err = conn.Invoke(ctx, getSecret, &request, &answer, grpc.ForceCodec(raw{}))
	outcome := Outcome{Details: []Detail{}}
	if err == nil {
		outcome.Code = "OK"
		outcome.Value = string(bytesField(answer, 1))
	} else {
		st, ok := status.FromError(err)
		if !ok {
			return fmt.Errorf("not a gRPC status: %w", err)
		}
		outcome.Code = st.Code().String()
		outcome.Message = st.Message()
		for _, any := range st.Proto().GetDetails() {
			detail := Detail{TypeURL: any.GetTypeUrl()}
			if detail.TypeURL == providerErr {
				if err := decodeProviderError(any.GetValue(), &detail); err != nil {
					return err
				}
			}
			outcome.Details = append(outcome.Details, detail)
		}
	}
	return json.NewEncoder(os.Stdout).Encode(outcome)
}

func tlsConfig(dir, address string) (*tls.Config, error) {
	ca, err := os.ReadFile(dir + "/ca.crt")
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return nil, errors.New("ca.crt holds no certificate")
	}
	pair, err := tls.LoadX509KeyPair(dir+"/client.crt", dir+"/client.key")
	if err != nil {
		return nil, err
	}
	host := address[:strings.LastIndex(address, ":")]
	return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, ServerName: host, MinVersion: tls.VersionTLS12}, nil
}

// encodeRequest writes a GetSecretRequest: remote_ref (1) {key (1)}, provider_ref (2)
// {api_version (1), kind (2), name (3), namespace (4), store_ref_kind (5)}, source_namespace (3).
func encodeRequest(reference, namespace, key string) ([]byte, error) {
	parts := strings.Split(reference, "/")
	if len(parts) < 4 {
		return nil, fmt.Errorf("--provider-ref %q: want apiVersion/kind/namespace/name", reference)
	}
	n := len(parts)
	apiVersion, kind, ns, name := strings.Join(parts[:n-3], "/"), parts[n-3], parts[n-2], parts[n-1]
	var remote []byte
	remote = appendString(remote, 1, key)
	var ref []byte
	ref = appendString(ref, 1, apiVersion)
	ref = appendString(ref, 2, kind)
	ref = appendString(ref, 3, name)
	ref = appendString(ref, 4, ns)
	ref = appendString(ref, 5, "SecretStore")
	var request []byte
	request = appendBytes(request, 1, remote)
	request = appendBytes(request, 2, ref)
	request = appendString(request, 3, namespace)
	return request, nil
}

func appendString(b []byte, field protowire.Number, s string) []byte {
	return appendBytes(b, field, []byte(s))
}

func appendBytes(b []byte, field protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// bytesField is the last value of a length-delimited field of a message, or nil.
func bytesField(message []byte, field protowire.Number) []byte {
	var found []byte
	_ = walk(message, func(n protowire.Number, t protowire.Type, v []byte) error {
		if n == field && t == protowire.BytesType {
			found = v
		}
		return nil
	})
	return found
}

// decodeProviderError reads provider.v1.Error: code (1), message (2), retryable (3),
// details (4, map<string, string>: entries of key (1) and value (2)).
func decodeProviderError(message []byte, into *Detail) error {
	return walk(message, func(n protowire.Number, t protowire.Type, v []byte) error {
		switch {
		case n == 1 && t == protowire.BytesType:
			into.Code = string(v)
		case n == 2 && t == protowire.BytesType:
			into.Message = string(v)
		case n == 3 && t == protowire.VarintType:
			value, _ := protowire.ConsumeVarint(v)
			into.Retryable = value != 0
		case n == 4 && t == protowire.BytesType:
			var k, val string
			if err := walk(v, func(n protowire.Number, t protowire.Type, v []byte) error {
				if t == protowire.BytesType && n == 1 {
					k = string(v)
				} else if t == protowire.BytesType && n == 2 {
					val = string(v)
				}
				return nil
			}); err != nil {
				return err
			}
			if into.Details == nil {
				into.Details = map[string]string{}
			}
			into.Details[k] = val
		}
		return nil
	})
}

// walk calls visit with each field of a message: its number, its wire type and its value (the
// contents of a length-delimited field, the encoded varint of a varint field).
func walk(message []byte, visit func(protowire.Number, protowire.Type, []byte) error) error {
	for len(message) > 0 {
		n, t, size := protowire.ConsumeTag(message)
		if size < 0 {
			return protowire.ParseError(size)
		}
		message = message[size:]
		var value []byte
		switch t {
		case protowire.BytesType:
			v, m := protowire.ConsumeBytes(message)
			if m < 0 {
				return protowire.ParseError(m)
			}
			value, size = v, m
		default:
			m := protowire.ConsumeFieldValue(n, t, message)
			if m < 0 {
				return protowire.ParseError(m)
			}
			value, size = message[:m], m
		}
		if err := visit(n, t, value); err != nil {
			return err
		}
		message = message[size:]
	}
	return nil
}
