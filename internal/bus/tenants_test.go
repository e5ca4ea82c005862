package bus_test

import (
	"testing"

	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/internal/bus"
)

func TestDecodeTenant(t *testing.T) {
	t.Parallel()
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	user, err := kp.PublicKey()
	require.NoError(t, err)
	akp, err := nkeys.CreateAccount()
	require.NoError(t, err)
	account, err := akp.PublicKey()
	require.NoError(t, err)

	rec, err := bus.DecodeTenant("ACME", []byte(`{"name":"ACME","queueLimit":5,"approvers":["`+user+`","`+account+`"],"added":"2026-01-01T00:00:00Z"}`))
	require.NoError(t, err)
	require.Equal(t, []string{user, account}, rec.Approvers)
	require.EqualValues(t, 5, rec.QueueLimit)
	// A record from before approvers has none.
	rec, err = bus.DecodeTenant("ACME", []byte(`{"name":"ACME","added":"2026-01-01T00:00:00Z"}`))
	require.NoError(t, err)
	require.Empty(t, rec.Approvers)

	for name, doc := range map[string]string{
		"not json":        `{`,
		"another name":    `{"name":"GLOBEX"}`,
		"negative limit":  `{"name":"ACME","queueLimit":-1}`,
		"seed as a key":   `{"name":"ACME","approvers":["SUAM2ZZQ7JDHJZ5ZKYDRNKZU5P6Q3D6KAXQ7N5QWD3U6GJK5T7ZMXZV2FY"]}`,
		"not a key":       `{"name":"ACME","approvers":["alice"]}`,
		"a server key":    `{"name":"ACME","approvers":["NDJ3NQ3SVFBWPNNEGRYR6QDJKDGN4GKDXVZDBCN5IG6IIV6ZSPYXYUYD"]}`,
		"approvers array": `{"name":"ACME","approvers":"` + user + `"}`,
	} {
		_, err := bus.DecodeTenant("ACME", []byte(doc))
		require.Error(t, err, name)
	}
	many := make([]string, bus.MaxTenantApprovers+1)
	for i := range many {
		many[i] = user
	}
	require.Error(t, bus.CheckApprovers(many))
	require.NoError(t, bus.CheckApprovers(many[1:]))
}
