package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// tlsFiles hands each TLS handshake the certificate, key and client CA
// last read from their files, and reads them again when one of them
// changes (checked at most once per recheck), so a rotation — cert-manager
// renewing the Secret mounted as the files — takes effect on the next
// connection without a restart, and the connections already open keep
// their streams. Files caught mid-write or otherwise unreadable leave the
// last good set in use; the error is logged once per change.
type tlsFiles struct {
	t       TLS
	log     *slog.Logger
	recheck time.Duration
	now     func() time.Time

	mu      sync.Mutex
	checked time.Time
	stamps  []fileStamp // of the files the current config was read from
	bad     []fileStamp // of the files last refused, so the error is logged once
	cfg     *tls.Config
}

type fileStamp struct {
	size    int64
	modTime time.Time
}

func newTLSFiles(t TLS, log *slog.Logger) (*tlsFiles, error) {
	if t.CertFile == "" || t.KeyFile == "" {
		return nil, errors.New("xds TLS: both a certificate and a key file are required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &tlsFiles{t: t, log: log, recheck: time.Second, now: time.Now}
	stamps := f.stat()
	cfg, err := f.read()
	if err != nil {
		return nil, err
	}
	f.cfg, f.stamps, f.checked = cfg, stamps, f.now()
	return f, nil
}

func (f *tlsFiles) files() []string {
	if f.t.ClientCAFile == "" {
		return []string{f.t.CertFile, f.t.KeyFile}
	}
	return []string{f.t.CertFile, f.t.KeyFile, f.t.ClientCAFile}
}

// stat follows links: a Secret volume swaps a symlink on rotation.
func (f *tlsFiles) stat() []fileStamp {
	var out []fileStamp
	for _, name := range f.files() {
		var s fileStamp
		if fi, err := os.Stat(name); err == nil {
			s = fileStamp{fi.Size(), fi.ModTime()}
		}
		out = append(out, s)
	}
	return out
}

func (f *tlsFiles) read() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.t.CertFile, f.t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("xds TLS: load %s and %s: %w", f.t.CertFile, f.t.KeyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.t.ClientCAFile != "" {
		pem, err := os.ReadFile(f.t.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("xds mTLS: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("xds mTLS: %s holds no PEM certificate", f.t.ClientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

func sameStamps(a, b []fileStamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].size != b[i].size || !a[i].modTime.Equal(b[i].modTime) {
			return false
		}
	}
	return true
}

// current returns the config to hand a handshake.
func (f *tlsFiles) current() *tls.Config {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if now.Sub(f.checked) < f.recheck {
		return f.cfg
	}
	f.checked = now
	stamps := f.stat()
	if sameStamps(stamps, f.stamps) || sameStamps(stamps, f.bad) {
		return f.cfg
	}
	cfg, err := f.read()
	if err != nil {
		f.bad = stamps
		f.log.Error("xDS TLS files changed but cannot be used; serving with the previous ones", "error", err)
		return f.cfg
	}
	f.cfg, f.stamps, f.bad = cfg, stamps, nil
	f.log.Info("xDS TLS files changed: new connections use them", "certificate", f.t.CertFile)
	return f.cfg
}

// serverConfig is the config grpc's credentials wrap: every handshake asks
// for the current one.
func (f *tlsFiles) serverConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return f.current(), nil }}
}
