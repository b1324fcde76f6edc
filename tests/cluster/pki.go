package main

// Certificates and keys for the local control plane, generated on first start
// of a data dir (nothing is read from fixture files in the module cache).

import (
	"crypto"
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

type pkiPaths struct {
	Dir                                       string
	CACert, CAKey                             string
	ServingCert, ServingKey                   string
	AdminCert, AdminKey                       string
	KCMCert, KCMKey                           string
	SchedulerCert, SchedulerKey               string
	FrontProxyCACert, FrontProxyCAKey         string
	FrontProxyClientCert, FrontProxyClientKey string
	SAKey, SAPub                              string
	// The API server's client certificate for admission webhooks, from a CA
	// of its own (a webhook trusts that CA only: see apiserver.go).
	WebhookClientCACert, WebhookClientCAKey string
	WebhookClientCert, WebhookClientKey     string
}

func newPKIPaths(dir string) pkiPaths {
	p := func(n string) string { return filepath.Join(dir, n) }
	return pkiPaths{
		Dir:    dir,
		CACert: p("ca.crt"), CAKey: p("ca.key"),
		ServingCert: p("apiserver.crt"), ServingKey: p("apiserver.key"),
		AdminCert: p("admin.crt"), AdminKey: p("admin.key"),
		KCMCert: p("controller-manager.crt"), KCMKey: p("controller-manager.key"),
		SchedulerCert: p("scheduler.crt"), SchedulerKey: p("scheduler.key"),
		FrontProxyCACert: p("front-proxy-ca.crt"), FrontProxyCAKey: p("front-proxy-ca.key"),
		FrontProxyClientCert: p("front-proxy-client.crt"), FrontProxyClientKey: p("front-proxy-client.key"),
		SAKey: p("sa.key"), SAPub: p("sa.pub"),
		WebhookClientCACert: p("webhook-client-ca.crt"), WebhookClientCAKey: p("webhook-client-ca.key"),
		WebhookClientCert: p("webhook-client.crt"), WebhookClientKey: p("webhook-client.key"),
	}
}

type keyPair struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func newKey() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n.Add(n, big.NewInt(1))
}

func newCA(cn string) (*keyPair, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: cert, key: key}, nil
}

func (ca *keyPair) issue(cn string, orgs []string, server bool, dns []string, ips []net.IP) (*keyPair, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if server {
		usage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(5 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  usage,
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: cert, key: key}, nil
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

func (kp *keyPair) write(certPath, keyPath string) error {
	if err := writePEM(certPath, "CERTIFICATE", kp.cert.Raw, 0o644); err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(kp.key)
	if err != nil {
		return err
	}
	return writePEM(keyPath, "PRIVATE KEY", der, 0o600)
}

// ensurePKI generates the whole set once per data dir; an existing set is reused.
func ensurePKI(p pkiPaths) error {
	if err := ensureBasePKI(p); err != nil {
		return err
	}
	return ensureWebhookClient(p)
}

// ensureWebhookClient makes the webhook client CA and certificate, also in
// a data dir kept from before they existed.
func ensureWebhookClient(p pkiPaths) error {
	if _, err := os.Stat(p.WebhookClientKey); err == nil {
		return nil
	}
	ca, err := newCA("kubeplug-webhook-client-ca")
	if err != nil {
		return err
	}
	if err := ca.write(p.WebhookClientCACert, p.WebhookClientCAKey); err != nil {
		return err
	}
	client, err := ca.issue("kube-apiserver-webhook-client", nil, false, nil, nil)
	if err != nil {
		return err
	}
	// The key last: its presence says the set is complete.
	return client.write(p.WebhookClientCert, p.WebhookClientKey)
}

func ensureBasePKI(p pkiPaths) error {
	if _, err := os.Stat(filepath.Join(p.Dir, ".complete")); err == nil {
		return nil
	}
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return err
	}
	ca, err := newCA("kubeplug-cluster-ca")
	if err != nil {
		return err
	}
	if err := ca.write(p.CACert, p.CAKey); err != nil {
		return err
	}
	serving, err := ca.issue("kube-apiserver", nil, true,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP(serviceIP)})
	if err != nil {
		return err
	}
	if err := serving.write(p.ServingCert, p.ServingKey); err != nil {
		return err
	}
	clients := []struct {
		cn, org   string
		cert, key string
	}{
		{"kubeplug-admin", "system:masters", p.AdminCert, p.AdminKey},
		{"system:kube-controller-manager", "", p.KCMCert, p.KCMKey},
		{"system:kube-scheduler", "", p.SchedulerCert, p.SchedulerKey},
	}
	for _, c := range clients {
		var orgs []string
		if c.org != "" {
			orgs = []string{c.org}
		}
		kp, err := ca.issue(c.cn, orgs, false, nil, nil)
		if err != nil {
			return err
		}
		if err := kp.write(c.cert, c.key); err != nil {
			return err
		}
	}
	fpca, err := newCA("front-proxy-ca")
	if err != nil {
		return err
	}
	if err := fpca.write(p.FrontProxyCACert, p.FrontProxyCAKey); err != nil {
		return err
	}
	fpc, err := fpca.issue("front-proxy-client", nil, false, nil, nil)
	if err != nil {
		return err
	}
	if err := fpc.write(p.FrontProxyClientCert, p.FrontProxyClientKey); err != nil {
		return err
	}
	sa, err := newKey()
	if err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(sa)
	if err != nil {
		return err
	}
	if err := writePEM(p.SAKey, "PRIVATE KEY", der, 0o600); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(sa.Public())
	if err != nil {
		return err
	}
	if err := writePEM(p.SAPub, "PUBLIC KEY", pub, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(p.Dir, ".complete"), nil, 0o644)
}

// writeKubeconfig writes a kubeconfig with embedded client cert/key.
func writeKubeconfig(path, server, caFile, certFile, keyFile, user string) error {
	read := func(f string) (string, error) {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		return b64(b), nil
	}
	ca, err := read(caFile)
	if err != nil {
		return err
	}
	crt, err := read(certFile)
	if err != nil {
		return err
	}
	key, err := read(keyFile)
	if err != nil {
		return err
	}
	content := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubeplug
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: kubeplug
  context:
    cluster: kubeplug
    user: %s
    namespace: default
current-context: kubeplug
`, server, ca, user, crt, key, user)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// loadKeyPair reads a PEM certificate and its PKCS#8 key (as written by keyPair.write).
func loadKeyPair(certPath, keyPath string) (*keyPair, error) {
	cb, err := os.ReadFile(certPath)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(cb)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: no PEM certificate", certPath)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certPath, err)
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	block, _ = pem.Decode(kb)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM key", keyPath)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: not a signing key", keyPath)
	}
	return &keyPair{cert: cert, key: signer}, nil
}

// ensureLoopbackServingCert issues (once) a serving certificate signed by the
// cluster CA for 127.0.0.1, ::1 and localhost, e.g. for the fault proxy.
func ensureLoopbackServingCert(p pkiPaths, cn, certPath, keyPath string) error {
	if _, err := loadKeyPair(certPath, keyPath); err == nil {
		return nil
	}
	ca, err := loadKeyPair(p.CACert, p.CAKey)
	if err != nil {
		return fmt.Errorf("cluster CA: %w", err)
	}
	kp, err := ca.issue(cn, nil, true, []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")})
	if err != nil {
		return err
	}
	// write under temporary names, then rename: a concurrent reader sees old or new
	if err := kp.write(certPath+".tmp", keyPath+".tmp"); err != nil {
		return err
	}
	if err := os.Rename(keyPath+".tmp", keyPath); err != nil {
		return err
	}
	return os.Rename(certPath+".tmp", certPath)
}
