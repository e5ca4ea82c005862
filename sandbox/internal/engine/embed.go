package engine

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"io/fs"
)

// The pattern always matches: the folder keeps a committed README and licence
// next to the fetched (and git-ignored) quickjs.wasm.
//
//go:embed wasm
var wasmFS embed.FS

// WasmSHA256 is the digest of the pinned quickjs-wasi 3.7.0 build.
const WasmSHA256 = "c0bd8f296e18cf074969f6401b9ecb72609a1323818ec2b9bf7a8f8d740d1363"

// FetchCommand is the command that installs the wasm file.
const FetchCommand = "make wasm"

// ErrWasmMissing reports a build made without the wasm file.
var ErrWasmMissing = errors.New("quickjs.wasm is not embedded in this build; run `" + FetchCommand +
	"` (bash scripts/fetch-quickjs.sh) and rebuild")

// EmbeddedWasm returns the embedded quickjs.wasm, verified against WasmSHA256.
func EmbeddedWasm() ([]byte, error) { return loadWasm(wasmFS) }

func loadWasm(fsys fs.FS) ([]byte, error) {
	b, err := fs.ReadFile(fsys, "wasm/quickjs.wasm")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrWasmMissing
	}
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != WasmSHA256 {
		return nil, errors.New("embedded quickjs.wasm has sha256 " + hex.EncodeToString(sum[:]) +
			", want " + WasmSHA256 + "; run `" + FetchCommand + "` and rebuild")
	}
	return b, nil
}
