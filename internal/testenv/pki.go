package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI is a throw-away certificate authority with one server and one client
// certificate, as PEM files, for TLS between the product and a test server.
type PKI struct {
	CACert, ServerCert, ServerKey, ClientCert, ClientKey string
}

// WritePKI creates the files in dir; the server certificate is for
// 127.0.0.1 and localhost.
func WritePKI(dir string) (*PKI, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "testenv-ovn-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	p := &PKI{CACert: filepath.Join(dir, "ca.pem")}
	if err := writePEM(p.CACert, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	for i, leaf := range []struct {
		name      string
		usage     x509.ExtKeyUsage
		cert, key *string
	}{
		{"server", x509.ExtKeyUsageServerAuth, &p.ServerCert, &p.ServerKey},
		{"client", x509.ExtKeyUsageClientAuth, &p.ClientCert, &p.ClientKey},
	} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: leaf.name},
			NotBefore: ca.NotBefore, NotAfter: ca.NotAfter, KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{leaf.usage}, DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, err
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, err
		}
		*leaf.cert, *leaf.key = filepath.Join(dir, leaf.name+"-cert.pem"), filepath.Join(dir, leaf.name+"-key.pem")
		if err := writePEM(*leaf.cert, "CERTIFICATE", der); err != nil {
			return nil, err
		}
		if err := writePEM(*leaf.key, "PRIVATE KEY", keyDER); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func writePEM(path, typ string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
