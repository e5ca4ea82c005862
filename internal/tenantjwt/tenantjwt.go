// Package tenantjwt makes what a multi-tenant toolq bus needs in NATS
// operator (JWT) mode, with the nats-io jwt and nkeys libraries: an
// operator with a signing key, a system account, the toolq account with
// the exports of deploy/nats/tenants.conf and its users (worker,
// scheduler, approver), and one account per tenant that imports its own
// subspace. The tenant id is the tenant account's public key.
//
// Everything lives in one directory:
//
//	operator.jwt            the operator (server.conf names it)
//	server.conf             the server configuration to include
//	jwt/<account>.jwt       the accounts, the store of the server's full resolver
//	keys/*.nk               seeds: operator, operator signing key, accounts, approver (0600)
//	creds/*.creds           user credentials: worker, scheduler, approver, sys, <tenant>-agent (0600)
//	tenants/<name>          a tenant's account public key
package tenantjwt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/toolq/toolq/contracts"
)

// Names of the accounts and keys Init makes.
const (
	AccountToolq  = "TOOLQ"
	AccountSystem = "SYS"
)

// Config says where the files are and what prefix the deployment's
// subjects have.
type Config struct {
	// Dir holds every file (see the package doc). Required.
	Dir string
	// Subjects names the subjects (prefix toolq by default).
	Subjects contracts.Subjects
}

func (c *Config) validate() error {
	if c == nil || c.Dir == "" {
		return contracts.Errorf(contracts.CodeInvalidInput, "tenantjwt: a directory is required")
	}
	return nil
}

// Setup is what Init made.
type Setup struct {
	Operator, System, Toolq string // public keys
	Approver                string // the approver's nkey (also its user)
	ServerConf              string // path of the server configuration
}

// Tenant is what AddTenant made.
type Tenant struct {
	Name string
	// Account is the account's public key: the tenant id, the token of
	// toolq.t.<tenant>.… and the name to register (bus.AddTenant).
	Account string
	// JWT is the signed account JWT, as stored for the resolver.
	JWT string
	// Creds is the path of the agent user's credentials file.
	Creds string
	// Approvers are the paths of the approvers' user JWTs, one per
	// AddOpts.Approvers key (no seed: it stays with its person).
	Approvers []string
}

// AddOpts are the options of AddTenant.
type AddOpts struct {
	// Approvers are public user nkeys (U…) of the tenant's exec approvers:
	// each gets a user JWT of the tenant's account with the
	// TENANT_APPROVER permissions. Give the same keys to tenant register
	// --approver.
	Approvers []string
}

func (c *Config) path(elem ...string) string {
	return filepath.Join(append([]string{c.Dir}, elem...)...)
}

// Init makes the operator, the system and toolq accounts, the toolq
// account's users and the server configuration in cfg.Dir. It refuses a
// directory that already has an operator.
func Init(cfg *Config) (*Setup, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	for _, d := range []string{"", "jwt", "keys", "creds", "tenants"} {
		if err := os.MkdirAll(cfg.path(d), 0o700); err != nil {
			return nil, fmt.Errorf("tenantjwt: %w", err)
		}
	}
	if _, err := os.Stat(cfg.path("operator.jwt")); err == nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "tenantjwt: %s already has an operator", cfg.Dir)
	}
	op, err := newKey(nkeys.CreateOperator, cfg.path("keys", "operator.nk"))
	if err != nil {
		return nil, err
	}
	signer, err := newKey(nkeys.CreateOperator, cfg.path("keys", "operator-signing.nk"))
	if err != nil {
		return nil, err
	}
	sys, err := newKey(nkeys.CreateAccount, cfg.path("keys", AccountSystem+".nk"))
	if err != nil {
		return nil, err
	}
	tq, err := newKey(nkeys.CreateAccount, cfg.path("keys", AccountToolq+".nk"))
	if err != nil {
		return nil, err
	}

	oc := jwt.NewOperatorClaims(op.pub)
	oc.Name = "toolq"
	oc.SigningKeys.Add(signer.pub)
	oc.SystemAccount = sys.pub
	opJWT, err := oc.Encode(op.kp)
	if err != nil {
		return nil, fmt.Errorf("tenantjwt: operator: %w", err)
	}
	if err := writeFile(cfg.path("operator.jwt"), []byte(opJWT)); err != nil {
		return nil, err
	}

	sc := jwt.NewAccountClaims(sys.pub)
	sc.Name = AccountSystem
	if err := cfg.storeAccount(sc, signer.kp); err != nil {
		return nil, err
	}
	tc := toolqAccount(cfg.Subjects, tq.pub)
	if err := cfg.storeAccount(tc, signer.kp); err != nil {
		return nil, err
	}

	if err := cfg.newUser(sys, "sys", nil, "sys.creds"); err != nil {
		return nil, err
	}
	s := cfg.Subjects
	for _, u := range []struct {
		name string
		r    role
	}{{"worker", roleWorker}, {"scheduler", roleScheduler}} {
		perms := u.r.permissions(s)
		if err := cfg.newUser(tq, u.name, &perms, u.name+".creds"); err != nil {
			return nil, err
		}
	}
	// The approver's user key is also its signing key for decisions
	// (toolq approve --seed-file), as in approvers.conf.
	approver, err := newKey(nkeys.CreateUser, cfg.path("keys", "approver.nk"))
	if err != nil {
		return nil, err
	}
	perms := roleApprover.permissions(s)
	if err := cfg.userCreds(tq, approver, "approver", &perms, "approver.creds"); err != nil {
		return nil, err
	}

	if err := writeFile(cfg.path("server.conf"), []byte(cfg.serverConf(sys.pub))); err != nil {
		return nil, err
	}
	return &Setup{Operator: op.pub, System: sys.pub, Toolq: tq.pub, Approver: approver.pub, ServerConf: cfg.path("server.conf")}, nil
}

// serverConf is the operator-mode configuration: the operator, the system
// account and a full resolver whose store is jwt/.
func (c *Config) serverConf(sysPub string) string {
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return p
	}
	return fmt.Sprintf(`# toolq for several tenants, in operator (JWT) mode: made by toolq tenant jwt init.
# Run it with nats-server -c server.conf -js; add tenants with
# toolq tenant jwt add NAME (and --push to a running server).
operator: %q
system_account: %s
resolver {
  type: full
  dir: %q
  allow_delete: false
}
`, abs(c.path("operator.jwt")), sysPub, abs(c.path("jwt")))
}

// AddTenant makes tenant name's account, which imports only its own
// subspace of the toolq account (the token at each export's
// account_token_position is the account's public key), and an agent user
// with the tenant-agent permissions. The account's JWT goes to the
// resolver's store, where a server finds it when the tenant first
// connects; Push gives it to a server that runs already.
func AddTenant(cfg *Config, name string, opts *AddOpts) (*Tenant, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := ValidName(name); err != nil {
		return nil, err
	}
	if opts == nil {
		opts = &AddOpts{}
	}
	for _, k := range opts.Approvers {
		if !nkeys.IsValidPublicUserKey(k) {
			return nil, contracts.Errorf(contracts.CodeInvalidInput, "tenantjwt: approver %q is not a public user nkey (U…)", k)
		}
	}
	signer, err := readKey(cfg.path("keys", "operator-signing.nk"))
	if err != nil {
		return nil, fmt.Errorf("tenantjwt: %w (run init first)", err)
	}
	// The account seed's file is made exclusively: a name is one tenant.
	acct, err := newKey(nkeys.CreateAccount, cfg.path("keys", "tenant-"+name+".nk"))
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, contracts.Errorf(contracts.CodeInvalidInput, "tenantjwt: tenant %s exists", name)
		}
		return nil, err
	}
	ac := TenantAccount(cfg.Subjects, name, acct.pub)
	if err := cfg.storeAccount(ac, signer.kp); err != nil {
		return nil, err
	}
	perms := roleTenantAgent.permissions(cfg.Subjects)
	credsName := name + "-agent.creds"
	if err := cfg.newUser(acct, name+"-agent", &perms, credsName); err != nil {
		return nil, err
	}
	var approvers []string
	aperms := roleTenantApprover.permissions(cfg.Subjects)
	for _, k := range opts.Approvers {
		uc := jwt.NewUserClaims(k)
		uc.Name = name + "-approver"
		uc.Permissions = aperms
		theJWT, err := uc.Encode(acct.kp)
		if err != nil {
			return nil, fmt.Errorf("tenantjwt: approver %s: %w", k, err)
		}
		path := cfg.path("creds", name+"-approver-"+k+".jwt")
		if err := writeFile(path, []byte(theJWT)); err != nil {
			return nil, err
		}
		approvers = append(approvers, path)
	}
	if err := writeFile(cfg.path("tenants", name), []byte(acct.pub+"\n")); err != nil {
		return nil, err
	}
	theJWT, err := os.ReadFile(cfg.path("jwt", acct.pub+".jwt"))
	if err != nil {
		return nil, fmt.Errorf("tenantjwt: %w", err)
	}
	return &Tenant{Name: name, Account: acct.pub, JWT: string(theJWT), Creds: cfg.path("creds", credsName), Approvers: approvers}, nil
}

// CheckImports refuses an account whose imports are not the shares of
// the toolq account, each with the account's own key as its tenant token.
func CheckImports(s contracts.Subjects, ac *jwt.AccountClaims) error {
	for _, im := range ac.Imports {
		ok := false
		for _, sh := range shares(s) {
			if im.Type == sh.kind && string(im.Subject) == sh.remote(ac.Subject) && string(im.LocalSubject) == sh.local {
				ok = true
				break
			}
		}
		if !ok {
			return contracts.Errorf(contracts.CodeInvalidInput,
				"tenantjwt: account %s (%s) imports %q: a tenant imports only its own subspace", ac.Name, ac.Subject, im.Subject)
		}
	}
	return nil
}

// ValidName accepts a tenant's account name: an id ([A-Za-z0-9_-]) that
// is no account toolq or the server keeps for itself.
func ValidName(name string) error {
	if err := contracts.ValidateID("tenant name", name); err != nil {
		return err
	}
	switch strings.ToUpper(name) {
	case AccountToolq, AccountSystem, "$SYS", "$G":
		return contracts.Errorf(contracts.CodeInvalidInput, "tenant name %s is reserved", name)
	}
	return nil
}

// share is one subspace the toolq account exports and each tenant imports:
// remote(tenant) is its subject in the toolq account, local what the
// tenant's clients use.
type share struct {
	kind   jwt.ExportType
	remote func(tenant string) string
	local  string
	resp   jwt.ResponseType // of a service: "" is a single reply
}

func shares(s contracts.Subjects) []share {
	cancels := contracts.KVSubject(s.CancelsBucket(), "")
	catalog := contracts.KVSubject(s.CatalogBucket(), "")
	direct := "$JS.API.DIRECT.GET." + s.EventsStream() + "."
	return []share{
		{jwt.Service, func(t string) string { return s.TenantRoot(t) + ".jobs.>" }, s.Jobs(), ""},
		{jwt.Service, func(t string) string { return s.TenantRoot(t) + ".cancel.*" }, s.Cancels(), ""},
		{jwt.Service, func(t string) string { return cancels + t + ".*" }, cancels + "*", ""},
		{jwt.Service, func(t string) string { return catalog + "t." + t + ".client.>" }, catalog + "client.>", ""},
		// A replay is answered with many messages: a streamed response.
		{jwt.Service, func(t string) string { return s.TenantRoot(t) + ".replay.*" }, s.Replay("*"), jwt.ResponseTypeStream},
		{jwt.Service, func(t string) string { return direct + s.TenantRoot(t) + ".events.>" }, direct + s.Events(), ""},
		{jwt.Stream, func(t string) string { return s.TenantRoot(t) + ".events.>" }, s.Events(), ""},
	}
}

// tokenPosition is the 1-based position of the tenant's token in sh's
// subjects.
func (sh share) tokenPosition() uint {
	for i, tok := range strings.Split(sh.remote("*"), ".") {
		if tok == "*" {
			return uint(i + 1) //nolint:gosec // G115: i counts a subject's tokens
		}
	}
	return 0
}

// toolqAccount is the toolq account: JetStream on (no limit of its own;
// every stream carries its own bound) and one export per share, open to
// every account but only for its own token.
func toolqAccount(s contracts.Subjects, pub string) *jwt.AccountClaims {
	ac := jwt.NewAccountClaims(pub)
	ac.Name = AccountToolq
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	for _, sh := range shares(s) {
		ac.Exports.Add(&jwt.Export{
			Name: sh.local, Subject: jwt.Subject(sh.remote("*")), Type: sh.kind,
			AccountTokenPosition: sh.tokenPosition(), ResponseType: sh.resp,
		})
	}
	return ac
}

// TenantAccount is the claims of tenant name's account pub: the imports
// of its own subspace of the toolq account under the plain names, and no
// JetStream. The server grants each import only because the token at the
// export's account_token_position is pub. The imports' account (the toolq
// account) is filled in when the claims are signed.
func TenantAccount(s contracts.Subjects, name, pub string) *jwt.AccountClaims {
	ac := jwt.NewAccountClaims(pub)
	ac.Name = name
	for _, sh := range shares(s) {
		ac.Imports.Add(&jwt.Import{
			Name: sh.local, Type: sh.kind, Subject: jwt.Subject(sh.remote(pub)),
			LocalSubject: jwt.RenamingSubject(sh.local),
		})
	}
	return ac
}

// SignAccount signs ac with the operator's signing key of cfg.Dir, filling
// in the toolq account of its imports, and stores it for the resolver. It
// refuses imports other than the account's own subspace (CheckImports).
func SignAccount(cfg *Config, ac *jwt.AccountClaims) (string, error) {
	if err := cfg.validate(); err != nil {
		return "", err
	}
	signer, err := readKey(cfg.path("keys", "operator-signing.nk"))
	if err != nil {
		return "", fmt.Errorf("tenantjwt: %w", err)
	}
	if err := cfg.storeAccount(ac, signer.kp); err != nil {
		return "", err
	}
	data, err := os.ReadFile(cfg.path("jwt", ac.Subject+".jwt"))
	return string(data), err
}

// ToolqAccount is the toolq account's public key in cfg.Dir.
func ToolqAccount(cfg *Config) (string, error) {
	k, err := readKey(cfg.path("keys", AccountToolq+".nk"))
	if err != nil {
		return "", fmt.Errorf("tenantjwt: %w", err)
	}
	return k.pub, nil
}

func (c *Config) storeAccount(ac *jwt.AccountClaims, signer nkeys.KeyPair) error {
	if !nkeys.IsValidPublicAccountKey(ac.Subject) {
		return contracts.Errorf(contracts.CodeInvalidInput, "tenantjwt: %q is no account key", ac.Subject)
	}
	if len(ac.Imports) > 0 {
		toolq, err := ToolqAccount(c)
		if err != nil {
			return err
		}
		for _, im := range ac.Imports {
			if im.Account == "" {
				im.Account = toolq
			}
		}
	}
	if err := CheckImports(c.Subjects, ac); err != nil {
		return err
	}
	vr := jwt.CreateValidationResults()
	ac.Validate(vr)
	if errs := vr.Errors(); len(errs) > 0 {
		return fmt.Errorf("tenantjwt: account %s: %w", ac.Name, errors.Join(errs...))
	}
	theJWT, err := ac.Encode(signer)
	if err != nil {
		return fmt.Errorf("tenantjwt: account %s: %w", ac.Name, err)
	}
	// Written whole or not at all: a running server may read it.
	path := c.path("jwt", ac.Subject+".jwt")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(theJWT), 0o600); err != nil { //nolint:gosec // G703: the name is a checked account key
		return fmt.Errorf("tenantjwt: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("tenantjwt: %w", err)
	}
	return nil
}

// newUser makes a user of acct with perms (nil: none) and writes its
// credentials to creds/<file>.
func (c *Config) newUser(acct *key, name string, perms *jwt.Permissions, file string) error {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return fmt.Errorf("tenantjwt: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return fmt.Errorf("tenantjwt: %w", err)
	}
	return c.userCreds(acct, &key{kp: kp, pub: pub}, name, perms, file)
}

func (c *Config) userCreds(acct, user *key, name string, perms *jwt.Permissions, file string) error {
	uc := jwt.NewUserClaims(user.pub)
	uc.Name = name
	if perms != nil {
		uc.Permissions = *perms
	}
	theJWT, err := uc.Encode(acct.kp)
	if err != nil {
		return fmt.Errorf("tenantjwt: user %s: %w", name, err)
	}
	seed, err := user.kp.Seed()
	if err != nil {
		return fmt.Errorf("tenantjwt: user %s: %w", name, err)
	}
	creds, err := jwt.FormatUserConfig(theJWT, seed)
	if err != nil {
		return fmt.Errorf("tenantjwt: user %s: %w", name, err)
	}
	return writeFile(c.path("creds", file), creds)
}

type key struct {
	kp  nkeys.KeyPair
	pub string
}

// newKey makes a key pair and writes its seed to path (0600, exclusively).
func newKey(create func() (nkeys.KeyPair, error), path string) (*key, error) {
	kp, err := create()
	if err != nil {
		return nil, fmt.Errorf("tenantjwt: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("tenantjwt: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("tenantjwt: %w", err)
	}
	if err := writeFile(path, append(seed, '\n')); err != nil {
		return nil, err
	}
	return &key{kp: kp, pub: pub}, nil
}

func readKey(path string) (*key, error) {
	data, err := os.ReadFile(path) //nolint:gosec // G304: a file of the operator's directory
	if err != nil {
		return nil, err
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(data))))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	return &key{kp: kp, pub: pub}, nil
}

// writeFile writes a new file, readable by its owner only.
func writeFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600) //nolint:gosec // G304: a file of the operator's directory
	if err != nil {
		return fmt.Errorf("tenantjwt: %w", err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("tenantjwt: %w", err)
	}
	return nil
}

// Push gives an account JWT to the running servers' resolvers
// ($SYS.REQ.CLAIMS.UPDATE); nc must be a user of the system account. It
// refuses a tenant account that imports anything but its own subspace
// (CheckImports): the server would store such a claim and drop the
// imports without a word.
func Push(ctx context.Context, nc *nats.Conn, s contracts.Subjects, accountJWT string) error {
	ac, err := jwt.DecodeAccountClaims(accountJWT)
	if err != nil {
		return contracts.Errorf(contracts.CodeInvalidInput, "tenantjwt: push: %v", err)
	}
	if err := CheckImports(s, ac); err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	msg, err := nc.RequestWithContext(ctx, "$SYS.REQ.CLAIMS.UPDATE", []byte(accountJWT))
	if err != nil {
		return fmt.Errorf("tenantjwt: push: %w", err)
	}
	var resp struct {
		Data *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"data"`
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("tenantjwt: push: %w: %q", err, msg.Data)
	}
	if resp.Error != nil {
		return fmt.Errorf("tenantjwt: push: %d %s", resp.Error.Code, resp.Error.Description)
	}
	return nil
}
