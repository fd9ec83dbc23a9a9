// Package ovn holds ovn-egress's side of the OVN northbound database: the
// libovsdb client (several endpoints, leader-only, TLS, reconnect forever,
// client indexes on the owner external_ids) and the NB applier, which diffs
// the desired rows from pkg/translate against the rows it owns in the client
// cache and writes the difference in one transaction.
package ovn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/ovn-egress/ovn-egress/pkg/nbdb"
	"github.com/ovn-egress/ovn-egress/pkg/nbdbext"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// ClientConfig says how to reach the NB database.
type ClientConfig struct {
	// Addresses are OVSDB endpoints: unix:PATH, tcp:HOST:PORT or ssl:HOST:PORT.
	// Several addresses name the members of a RAFT cluster.
	Addresses []string
	// PrivateKey, Certificate and CACert are PEM files for ssl: endpoints.
	PrivateKey, Certificate, CACert string
	// ServerName overrides the name checked in the server's certificate.
	ServerName string
	// ConnectTimeout bounds the first connection (and each reconnect attempt;
	// with InactivityProbe, at most half of it).
	ConnectTimeout time.Duration
	// InactivityProbe, when set, echoes the server after this much silence and
	// reconnects when it does not answer within as long again (libovsdb
	// wants it longer than a reconnect attempt: those are bounded by half of
	// it when ConnectTimeout is not shorter).
	InactivityProbe time.Duration
	// Registry, when set, gets libovsdb's own client metrics as
	// ovn_egress_nb_client_* (disconnects_total counts every lost
	// connection, a RAFT leader change among them: the client is
	// leader-only).
	Registry prometheus.Registerer
}

// ParseAddresses splits a comma-separated --nb-address value and checks each
// endpoint's scheme.
func ParseAddresses(s string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(s, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		scheme, rest, ok := strings.Cut(a, ":")
		if !ok || rest == "" || (scheme != "unix" && scheme != "tcp" && scheme != "ssl") {
			return nil, fmt.Errorf("invalid OVSDB address %q: want unix:PATH, tcp:HOST:PORT or ssl:HOST:PORT", a)
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no OVSDB address given")
	}
	return out, nil
}

// Validate checks the configuration.
func (c ClientConfig) Validate() error {
	if len(c.Addresses) == 0 {
		return fmt.Errorf("no NB address")
	}
	ssl := false
	for _, a := range c.Addresses {
		if _, err := ParseAddresses(a); err != nil {
			return err
		}
		ssl = ssl || strings.HasPrefix(a, "ssl:")
	}
	if ssl && (c.PrivateKey == "" || c.Certificate == "" || c.CACert == "") {
		return fmt.Errorf("ssl: NB addresses need a private key, a certificate and a CA certificate")
	}
	return nil
}

// Plaintext returns the tcp: endpoints that are not on a loopback
// address: anyone who reaches one may write the NB, ovn-egress's rows
// included.
func (c ClientConfig) Plaintext() []string {
	var out []string
	for _, a := range c.Addresses {
		endpoints, _ := ParseAddresses(a) // an invalid one fails Validate
		for _, one := range endpoints {
			rest, ok := strings.CutPrefix(one, "tcp:")
			if !ok {
				continue
			}
			host, _, err := net.SplitHostPort(rest)
			if ip, perr := netip.ParseAddr(host); err == nil && perr == nil && ip.IsLoopback() {
				continue
			}
			out = append(out, one)
		}
	}
	return out
}

// NBModel returns the NB client database model with the client indexes
// ovn-egress reads through: owned rows by their k8s.ovn.org/name (the key of
// a sync), routers by name. With natMatch the NAT table is pkg/nbdbext's
// (NAT.match and NAT.priority; the NB must have them).
func NBModel(natMatch bool) (model.ClientDBModel, error) {
	base, err := nbdb.FullDatabaseModel()
	if err != nil {
		return base, err
	}
	tables := map[string]model.Model{}
	for name, t := range base.Types() {
		tables[name] = reflect.New(t.Elem()).Interface().(model.Model)
	}
	if natMatch {
		tables[nbdb.NATTable] = &nbdbext.NAT{}
	}
	m, err := model.NewClientDBModel(base.Name(), tables)
	if err != nil {
		return m, err
	}
	// One client index only: a lookup picks the first index whose value it
	// finds, and a row lacking an indexed key is indexed under "" — a second
	// external_ids index would answer a by-name probe with foreign rows.
	byName := model.ClientIndex{Columns: []model.ColumnKey{{Column: "external_ids", Key: translate.KeyName}}}
	m.SetIndexes(map[string][]model.ClientIndex{
		nbdb.LogicalRouterTable:            {{Columns: []model.ColumnKey{{Column: "name"}}}},
		nbdb.LogicalRouterPolicyTable:      {byName},
		nbdb.AddressSetTable:               {byName},
		nbdb.NATTable:                      {byName},
		nbdb.LogicalRouterStaticRouteTable: {byName},
	})
	return m, nil
}

// NewNBClient connects to NB (leader-only, reconnecting forever) and starts a
// monitor of every table ovn-egress reads. The returned client's cache is
// complete once it returns. The NAT table's model follows the NB's schema
// (FeaturesOf tells which): a first connection reads the schema and closes.
func NewNBClient(ctx context.Context, cfg ClientConfig, log *logrus.Entry) (client.Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, cfg.connectTimeout())
	defer cancel()
	natMatch, err := probeNATMatch(cctx, cfg, log)
	if err != nil {
		return nil, err
	}
	m, err := NBModel(natMatch)
	if err != nil {
		return nil, fmt.Errorf("nb model: %w", err)
	}
	c, err := dial(cctx, cfg, m, "NB", log, true)
	if err != nil {
		return nil, err
	}
	// Only the tables the translation reads or writes: a smaller cache, and
	// no churn from Logical_Switch_Port or ACL updates.
	lsp := &nbdb.LogicalSwitchPort{}
	mon := c.NewMonitor(
		client.WithTable(&nbdb.LogicalRouter{}),
		client.WithTable(&nbdb.LogicalRouterPort{}),
		client.WithTable(&nbdb.LogicalRouterPolicy{}),
		client.WithTable(&nbdb.AddressSet{}),
		natTable(natMatch),
		client.WithTable(&nbdb.LogicalRouterStaticRoute{}),
		client.WithTable(lsp, &lsp.Name, &lsp.Type, &lsp.Options),
		client.WithTable(&nbdb.NBGlobal{}),
	)
	if _, err := c.Monitor(cctx, mon); err != nil {
		c.Close()
		return nil, fmt.Errorf("monitor NB: %w", err)
	}
	return c, nil
}

// probeNATMatch connects once with the NB 7.0.0 model, which every
// supported NB accepts, and reads whether the server's NAT table has match
// and priority.
func probeNATMatch(ctx context.Context, cfg ClientConfig, log *logrus.Entry) (bool, error) {
	m, err := NBModel(false)
	if err != nil {
		return false, fmt.Errorf("nb model: %w", err)
	}
	c, err := dial(ctx, cfg, m, "NB", log, false)
	if err != nil {
		return false, err
	}
	defer c.Close()
	return schemaHasNATMatch(c.Schema()), nil
}

// connectTimeout bounds a connection attempt (10 s unless set).
func (c ClientConfig) connectTimeout() time.Duration {
	if c.ConnectTimeout == 0 {
		return 10 * time.Second
	}
	return c.ConnectTimeout
}

// dial connects a client of model m to the database cfg names (what: NB
// or SB, for errors), reconnecting forever when reconnect is set.
func dial(ctx context.Context, cfg ClientConfig, m model.ClientDBModel, what string, log *logrus.Entry, reconnect bool) (client.Client, error) {
	opts, err := clientOptions(cfg, log, reconnect)
	if err != nil {
		return nil, err
	}
	c, err := client.NewOVSDBClient(m, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s client: %w", strings.ToLower(what), err)
	}
	if err := c.Connect(ctx); err != nil {
		return nil, fmt.Errorf("connect to %s %s: %w", what, strings.Join(cfg.Addresses, ","), err)
	}
	return c, nil
}

// natTable monitors the NAT table with the model NBModel(natMatch) has.
func natTable(natMatch bool) client.MonitorOption {
	if natMatch {
		return client.WithTable(&nbdbext.NAT{})
	}
	return client.WithTable(&nbdb.NAT{})
}

func clientOptions(cfg ClientConfig, log *logrus.Entry, reconnect bool) ([]client.Option, error) {
	var opts []client.Option
	for _, a := range cfg.Addresses {
		opts = append(opts, client.WithEndpoint(a))
	}
	// A backoff without an elapsed-time limit: libovsdb panics when the
	// reconnect backoff gives up.
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 100 * time.Millisecond
	bo.MaxInterval = 5 * time.Second
	bo.MaxElapsedTime = 0
	timeout := cfg.connectTimeout()
	opts = append(opts, client.WithLeaderOnly(true))
	if reconnect && cfg.InactivityProbe > 0 && timeout >= cfg.InactivityProbe {
		// libovsdb wants the probe longer than a reconnect attempt.
		timeout = cfg.InactivityProbe / 2
	}
	if reconnect {
		opts = append(opts, client.WithReconnect(timeout, bo))
	}
	if reconnect && cfg.Registry != nil {
		opts = append(opts, client.WithMetricsRegistryNamespaceSubsystem(replacing{cfg.Registry}, "ovn_egress", "nb_client"))
	}
	if reconnect && cfg.InactivityProbe > 0 {
		opts = append(opts, client.WithInactivityCheck(cfg.InactivityProbe, timeout, bo))
	}
	if cfg.PrivateKey != "" || cfg.Certificate != "" || cfg.CACert != "" {
		tc, err := tlsConfig(cfg)
		if err != nil {
			return nil, err
		}
		opts = append(opts, client.WithTLSConfig(tc))
	}
	if log != nil {
		l := logrLogger(log)
		opts = append(opts, client.WithLogger(&l))
	}
	return opts, nil
}

func tlsConfig(cfg ClientConfig) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(cfg.Certificate, cfg.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("load NB client certificate: %w", err)
	}
	pem, err := os.ReadFile(cfg.CACert)
	if err != nil {
		return nil, fmt.Errorf("read NB CA certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate found in %s", cfg.CACert)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: cfg.ServerName, MinVersion: tls.VersionTLS12}, nil
}

// logrLogger bridges libovsdb's logr logging to logrus: libovsdb's chatty
// V(>=1) lines only at debug level.
func logrLogger(log *logrus.Entry) logr.Logger {
	verbosity := 0
	if log.Logger.IsLevelEnabled(logrus.DebugLevel) {
		verbosity = 4
	}
	return funcr.New(func(prefix, args string) {
		log.WithField("lib", "libovsdb").Debug(strings.TrimSpace(prefix + " " + args))
	}, funcr.Options{Verbosity: verbosity})
}

// ConnectNB retries the first NB connection with a capped backoff: a master
// started before its database waits for it instead of crash-looping.
func ConnectNB(ctx context.Context, cfg ClientConfig, log *logrus.Entry) (client.Client, error) {
	if plain := cfg.Plaintext(); len(plain) > 0 {
		log.WithField("endpoints", strings.Join(plain, ",")).Warn("the NB is reached over plaintext tcp on a non-loopback address: anyone who reaches it may write NB rows; use ssl: endpoints (docs/security.md)")
	}
	delay := 500 * time.Millisecond
	for {
		c, err := NewNBClient(ctx, cfg, log.WithField("controller", "libovsdb"))
		if err == nil {
			log.WithField("endpoint", c.CurrentEndpoint()).Infof("connected to NB; %s", FeaturesOf(c))
			return c, nil
		}
		log.WithError(err).Warn("NB not reachable yet; retrying")
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect to NB: %w", errors.Join(ctx.Err(), err))
		case <-time.After(delay):
		}
		delay = min(2*delay, 10*time.Second)
	}
}

// replacing registers collectors in place of earlier ones with the same
// descriptors: every connection attempt of ConnectNB builds a new libovsdb
// client, and each registers its metrics; the one that connected is the one
// that stays.
type replacing struct{ prometheus.Registerer }

func (r replacing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		r.Unregister(c)
		r.Registerer.MustRegister(c)
	}
}
