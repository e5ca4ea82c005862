package cli

import (
	"fmt"
	"os"

	"github.com/nats-io/nkeys"
	"github.com/spf13/cobra"
)

func newKeygenCmd(g *globals) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "keygen --out FILE",
		Short: "Make an nkey user (an approver's, or any NATS user's): write its seed, print its public key",
		Long: `keygen makes a new nkey user with the nkeys library, writes its seed to FILE
(mode 0600; an existing file is never overwritten) and prints the public key
(U…). Give the public key to whoever configures the bus — a worker's
--approver, toolq tenant add/register --approver, a user line of the NATS
config — and keep the seed with its person: toolq approve --seed-file FILE.`,
		Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			pub, err := writeUserSeed(out)
			if err != nil {
				return fmt.Errorf("keygen: %w", err)
			}
			if g.jsonOut {
				return g.printJSON(map[string]any{"user": pub, "seedFile": out})
			}
			_, err = fmt.Fprintln(g.stdout, pub)
			return err
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "file to write the seed to (required; must not exist)")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

// writeUserSeed makes an nkey user, writes its seed to path (0600, never
// over an existing file) and returns its public key.
func writeUserSeed(path string) (string, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", err
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return "", err
	}
	seed, err := kp.Seed()
	if err != nil {
		return "", err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600) //nolint:gosec // G304: the operator names the seed file
	if err != nil {
		return "", fmt.Errorf("seed file: %w", err)
	}
	_, err = f.Write(append(seed, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("seed file: %w", err)
	}
	return pub, nil
}
