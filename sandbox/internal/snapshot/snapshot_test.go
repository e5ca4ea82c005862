package snapshot

import (
	"bytes"
	"crypto/sha256"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"
)

var key = []byte("0123456789abcdef0123456789abcdef")

func testCodec(tb testing.TB, wasm string) (*Codec, []byte) {
	tb.Helper()
	image := make([]byte, 2*pageSize)
	for i := range image {
		image[i] = byte(i * 7)
	}
	c, err := NewCodec(Key{ID: "k1", Key: key}, nil, sha256.Sum256([]byte(wasm)), sha256.Sum256(image), image, 8*pageSize)
	require.NoError(tb, err)
	tb.Cleanup(c.Close)
	return c, image
}

func sample(image []byte) *Snapshot {
	mem := make([]byte, 3*pageSize)
	copy(mem, image)
	copy(mem[100:], "changed bytes")
	copy(mem[2*pageSize+5:], "grown page")
	return &Snapshot{
		Memory: mem, StackPointer: 1 << 20, RuntimePtr: 1234, ContextPtr: 5678, Host: []byte(`{"runId":"r"}`),
		Binding: Binding{RunID: "r", Session: "s", Step: 3},
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	c, image := testCodec(t, "wasm")
	s := sample(image)
	blob, err := c.Encode(s, 0)
	require.NoError(t, err)
	require.Less(t, len(blob), 1024, "the delta against the image compresses to almost nothing")
	got, err := c.Decode(blob, 0)
	require.NoError(t, err)
	s.KeyID = "k1"
	require.Equal(t, s, got)

	_, err = c.Encode(s, len(blob)-1)
	require.ErrorIs(t, err, ErrTooLarge)
	_, err = c.Decode(blob, len(blob)-1)
	require.ErrorIs(t, err, ErrTooLarge)
}

// TestOpenApply: Open checks and decompresses without building memory;
// Apply over the image (and zeros past it) gives Decode's memory, writing
// only the chunks that differ; a wrong size or a released snapshot is
// refused, and Release may be called twice.
func TestOpenApply(t *testing.T) {
	t.Parallel()
	c, image := testCodec(t, "wasm")
	s := sample(image)
	blob, err := c.Encode(s, 0)
	require.NoError(t, err)
	o, err := c.Open(blob, 0)
	require.NoError(t, err)
	require.Equal(t, len(s.Memory), o.MemorySize)
	require.Equal(t, s.Host, o.Host)
	require.Equal(t, s.Binding, o.Binding)
	require.Equal(t, [3]uint32{s.StackPointer, s.RuntimePtr, s.ContextPtr}, [3]uint32{o.StackPointer, o.RuntimePtr, o.ContextPtr})
	require.Error(t, o.Apply(make([]byte, o.MemorySize-pageSize)))

	mem := make([]byte, o.MemorySize)
	copy(mem, image)
	require.NoError(t, o.Apply(mem))
	require.Equal(t, s.Memory, mem)

	// Chunks equal to the image are not written: a marker there survives.
	marked := make([]byte, o.MemorySize)
	copy(marked, image)
	marked[pageSize] ^= 0xff
	require.NoError(t, o.Apply(marked))
	require.Equal(t, s.Memory[pageSize]^0xff, marked[pageSize])

	o.Release()
	o.Release()
	require.Error(t, o.Apply(mem))
}

// TestFramesWithAChecksumOpen: snapshots written before frames went
// without a checksum (older workers' encoders add one) still open, and
// today's frames carry none.
func TestFramesWithAChecksumOpen(t *testing.T) {
	t.Parallel()
	c, image := testCodec(t, "wasm")
	s := sample(image)
	blob, err := c.Encode(s, 0)
	require.NoError(t, err)
	start := headerSize + int(blob[5]) + int(leUint16(blob[6:]))
	require.Zero(t, blob[start+4]&0x04, "no content checksum flag in the frame header")

	older, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithLowerEncoderMem(true))
	require.NoError(t, err)
	mine := c.enc
	c.enc = older
	old, err := c.Encode(s, 0)
	c.enc = mine
	require.NoError(t, older.Close())
	require.NoError(t, err)
	require.NotZero(t, old[start+4]&0x04, "the older encoder writes a checksum")
	got, err := c.Decode(old, 0)
	require.NoError(t, err)
	require.Equal(t, s.Memory, got.Memory)
	require.Equal(t, s.Host, got.Host)
}

func TestRefused(t *testing.T) {
	t.Parallel()
	c, image := testCodec(t, "wasm")
	blob, err := c.Encode(sample(image), 0)
	require.NoError(t, err)
	foreign, _ := testCodec(t, "other wasm")
	otherKey, err := NewCodec(Key{ID: "k1", Key: []byte("another key of at least 32 bytes!!")}, nil, c.wasmSHA, c.imageSHA, image, 8*pageSize)
	require.NoError(t, err)
	defer otherKey.Close()

	_, err = foreign.Decode(blob, 0)
	require.ErrorIs(t, err, ErrForeignBuild)
	_, err = otherKey.Decode(blob, 0)
	require.ErrorIs(t, err, ErrSignature)
	for i := 0; i < len(blob); i += 7 {
		b := bytes.Clone(blob)
		b[i] ^= 1
		_, err := c.Decode(b, 0)
		require.Error(t, err, "flipped byte %d", i)
	}
	for _, n := range []int{0, 1, 50, headerSize, headerSize + macSize, len(blob) - 1} {
		_, err := c.Decode(blob[:n], 0)
		require.Error(t, err, "truncated to %d", n)
	}
}

// TestKeyRotation: a codec verifies with its signing key and its older
// keys; a snapshot signed with a key it does not hold is refused naming the
// key's id; the binding and key id are signed.
func TestKeyRotation(t *testing.T) {
	t.Parallel()
	old, image := testCodec(t, "wasm")
	blob, err := old.Encode(sample(image), 0)
	require.NoError(t, err)
	newKey := Key{ID: "k2", Key: []byte("the new key, at least 32 bytes long")}
	rotated, err := NewCodec(newKey, []Key{{ID: "k1", Key: key}}, old.wasmSHA, old.imageSHA, image, 8*pageSize)
	require.NoError(t, err)
	defer rotated.Close()
	got, err := rotated.Decode(blob, 0)
	require.NoError(t, err)
	require.Equal(t, "k1", got.KeyID)
	require.Equal(t, Binding{RunID: "r", Session: "s", Step: 3}, got.Binding)
	fresh, err := rotated.Encode(sample(image), 0)
	require.NoError(t, err)

	only, err := NewCodec(newKey, nil, old.wasmSHA, old.imageSHA, image, 8*pageSize)
	require.NoError(t, err)
	defer only.Close()
	_, err = only.Decode(blob, 0)
	require.ErrorIs(t, err, ErrUnknownKey)
	require.ErrorContains(t, err, `key id "k1"`)
	require.ErrorContains(t, err, `"k2"`)
	_, err = old.Decode(fresh, 0)
	require.ErrorIs(t, err, ErrUnknownKey)
	require.ErrorContains(t, err, `key id "k2"`)

	// Relabelling a snapshot with another held key id breaks its signature.
	idAt := headerSize
	relabelled := bytes.Clone(fresh)
	copy(relabelled[idAt:idAt+2], "k1")
	_, err = rotated.Decode(relabelled, 0)
	require.ErrorIs(t, err, ErrSignature)

	for _, bad := range [][]Key{{{ID: "", Key: key}}, {{ID: "a b", Key: key}}, {{ID: "k2", Key: key}}, {{ID: "k3", Key: []byte("short")}}} {
		_, err := NewCodec(newKey, bad, old.wasmSHA, old.imageSHA, image, 8*pageSize)
		require.Error(t, err)
	}
}

// FuzzDecode feeds arbitrary bytes to the decoder, and signed blobs with
// arbitrary headers and payloads (the fuzzer holds the key, as an attacker
// who stole it would): Decode never panics, and what it accepts is sound.
func FuzzDecode(f *testing.F) {
	c, image := testCodec(f, "wasm")
	blob, err := c.Encode(sample(image), 0)
	require.NoError(f, err)
	f.Add(blob, false)
	f.Add(blob[:headerSize+macSize], true)
	f.Add([]byte("TQJS\x01"), true)
	f.Fuzz(func(t *testing.T, b []byte, resign bool) {
		if resign && len(b) >= headerSize+macSize {
			b = bytes.Clone(b)
			copy(b[0:4], magic[:])
			b[4] = Version
			copy(b[8:40], c.wasmSHA[:])
			copy(b[40:72], c.imageSHA[:])
			mac := hmacSum(b[:len(b)-macSize])
			copy(b[len(b)-macSize:], mac)
		}
		s, err := c.Decode(b, 1<<20)
		if err != nil {
			return
		}
		require.Len(t, s.Memory, int(leUint32(b[72:])))
		require.Zero(t, len(s.Memory)%pageSize)
		require.GreaterOrEqual(t, len(s.Memory), len(image))
	})
}
