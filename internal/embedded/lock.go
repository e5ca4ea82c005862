package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// lockName is the file in a store directory that the running server holds
// locked, with its pid and listen address inside for the next one to read.
const lockName = "toolq.lock"

// lockDir takes the store directory for this process. Two servers on one
// directory would both start and lose each other's messages, so the second
// one fails, naming the first.
func lockDir(dir, listen string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("embedded: store dir: %w", err)
	}
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600) //nolint:gosec // G304: the operator names the store directory
	if err != nil {
		return nil, fmt.Errorf("embedded: lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil { //nolint:gosec // G115: a descriptor fits an int
		holder, _ := os.ReadFile(path) //nolint:gosec // G304: as above
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("embedded: store dir %s is in use by another server (%s); stop it or pick another data directory",
				dir, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("embedded: lock %s: %w", path, err)
	}
	if listen == "" {
		listen = "in-process only"
	}
	_ = f.Truncate(0)
	_, _ = fmt.Fprintf(f, "pid %d, listening on %s\n", os.Getpid(), listen)
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) //nolint:gosec // G115: as above
		_ = f.Close()
	}, nil
}
