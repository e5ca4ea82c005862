package cli

import (
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"
)

// authFlags are how every command logs in to NATS: a creds file (operator
// JWT deployments), an nkey seed (deploy/nats/*.conf nkey users), or a user
// and password from the environment, plus TLS.
type authFlags struct {
	creds, nkeySeed        string
	tlsCA, tlsCert, tlsKey string
}

func (a *authFlags) register(pf *pflag.FlagSet) {
	pf.StringVar(&a.creds, "creds", os.Getenv("TOOLQ_CREDS"), "NATS credentials file (user JWT and seed) (env TOOLQ_CREDS)")
	pf.StringVar(&a.nkeySeed, "nkey-seed", os.Getenv("TOOLQ_NKEY_SEED"), "log in as the nkey user of this seed file (env TOOLQ_NKEY_SEED)")
	pf.StringVar(&a.tlsCA, "tls-ca", os.Getenv("TOOLQ_TLS_CA"), "CA certificate file that signs the server's (env TOOLQ_TLS_CA)")
	pf.StringVar(&a.tlsCert, "tls-cert", os.Getenv("TOOLQ_TLS_CERT"), "client certificate file for mutual TLS (env TOOLQ_TLS_CERT)")
	pf.StringVar(&a.tlsKey, "tls-key", os.Getenv("TOOLQ_TLS_KEY"), "client key file for mutual TLS (env TOOLQ_TLS_KEY)")
}

// options turns the flags, and TOOLQ_NATS_USER / TOOLQ_NATS_PASSWORD from
// the environment (never a flag: it would show in ps), into nats options.
func (a *authFlags) options() ([]nats.Option, error) {
	var opts []nats.Option
	n := 0
	if a.creds != "" {
		opts = append(opts, nats.UserCredentials(a.creds))
		n++
	}
	if a.nkeySeed != "" {
		opt, err := nats.NkeyOptionFromSeed(a.nkeySeed)
		if err != nil {
			return nil, fmt.Errorf("--nkey-seed: %w", err)
		}
		opts = append(opts, opt)
		n++
	}
	if user := os.Getenv("TOOLQ_NATS_USER"); user != "" {
		opts = append(opts, nats.UserInfo(user, os.Getenv("TOOLQ_NATS_PASSWORD")))
		n++
	}
	if n > 1 {
		return nil, fmt.Errorf("log in one way: --creds, --nkey-seed or TOOLQ_NATS_USER")
	}
	if a.tlsCA != "" {
		opts = append(opts, nats.RootCAs(a.tlsCA))
	}
	if (a.tlsCert == "") != (a.tlsKey == "") {
		return nil, fmt.Errorf("--tls-cert and --tls-key go together")
	}
	if a.tlsCert != "" {
		opts = append(opts, nats.ClientCert(a.tlsCert, a.tlsKey))
	}
	return opts, nil
}

// redactURL hides the secrets of a NATS URL list for logs and errors: a
// password becomes "xxxxx", and so does a user part without one (a token).
func redactURL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			if strings.Contains(p, "@") {
				parts[i] = "(unparsable URL with credentials)"
			}
			continue
		}
		if u.User == nil {
			continue
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		} else {
			u.User = url.User("xxxxx")
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
