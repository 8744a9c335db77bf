package mockmodel

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// newTLS makes a CA and a server certificate for host signed by it, and returns the CA's
// certificate (PEM) and the server's TLS config. The leaf is separate from the CA because
// rustls, which codex uses, refuses a CA certificate presented as the server's
// (CaUsedAsEndEntity).
func newTLS(host string) ([]byte, *tls.Config, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("mock model: tls: ca key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "codex-warm mock model CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("mock model: tls: ca certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, fmt.Errorf("mock model: tls: ca certificate: %w", err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("mock model: tls: server key: %w", err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "codex-warm mock model"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	if ip := net.ParseIP(host); ip != nil && !ip.Equal(net.IPv4(127, 0, 0, 1)) && !ip.Equal(net.IPv6loopback) {
		leafTmpl.IPAddresses = append(leafTmpl.IPAddresses, ip)
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("mock model: tls: server certificate: %w", err)
	}
	conf := &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}},
		MinVersion:   tls.VersionTLS12,
		// A websocket upgrade needs HTTP/1.1.
		NextProtos: []string{"http/1.1"},
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), conf, nil
}

// CACert is the PEM certificate of the CA that signed the mock's server certificate (nil
// without Config.TLS). Clients trust the mock by trusting it.
func (m *Model) CACert() []byte {
	return append([]byte(nil), m.caPEM...)
}

// WriteCA writes CACert to path, for codex's SSL_CERT_FILE. Without Config.TLS it is an error.
func (m *Model) WriteCA(path string) error {
	if m.caPEM == nil {
		return fmt.Errorf("mock model: write ca %s: the mock does not serve TLS", path)
	}
	if err := os.WriteFile(path, m.caPEM, 0o644); err != nil {
		return fmt.Errorf("mock model: write ca: %w", err)
	}
	return nil
}
