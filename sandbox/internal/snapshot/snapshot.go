// Package snapshot encodes and decodes signed, compressed VM snapshots: the
// linear memory of a QuickJS VM as a delta against the clean post-init image,
// its registers and the host's bookkeeping.
//
// Layout (integers little-endian):
//
//	0   4  magic "TQJS"
//	4   1  version (2)
//	5   1  key id length k (1…64)
//	6   2  binding length m
//	8   32 sha256 of the quickjs.wasm build
//	40  32 sha256 of the post-init image
//	72  4  memory size in bytes (a multiple of 64 KiB)
//	76  4  stack pointer
//	80  4  runtime pointer
//	84  4  context pointer
//	88  4  host state length
//	92  4  payload length
//	96  k  key id: names the key the HMAC was made with
//	…   m  binding: run id length (2), run id, session length (2),
//	       session, step (4)
//	…   n  payload: zstd(host state ‖ chunk bitmap ‖ changed chunks)
//	…   32 HMAC-SHA256 of everything before it
//
// The binding ties a snapshot to its run, session and step (the n-th
// suspension), so a signed snapshot of one run cannot be restored as
// another, nor as an older step of the same run. The key id lets keys
// rotate: a codec signs with its current key and verifies with it and any
// older key it still holds, and a snapshot signed with a key it does not
// hold is refused naming that key's id.
//
// Memory is cut into 1 KiB chunks; the bitmap (one bit per chunk, LSB
// first) marks the chunks that differ from the image (from zeros past the
// image's end), and only those follow, XORed with the image. A run idle on
// one call changes a few dozen chunks of 1.4 MB, so compression sees
// kilobytes, not megabytes.
package snapshot

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Version is the format version written by Encode.
const Version = 2

// MaxKeyIDBytes bounds a key id.
const MaxKeyIDBytes = 64

const (
	headerSize = 96
	macSize    = sha256.Size
	pageSize   = 65536
	chunkSize  = 1024
)

var zeroChunk [chunkSize]byte

var magic = [4]byte{'T', 'Q', 'J', 'S'}

// Errors of Decode. ErrTooLarge is the only one that is not "refused as
// invalid".
var (
	ErrTooLarge     = errors.New("snapshot exceeds maxSnapshotBytes")
	ErrTruncated    = errors.New("snapshot is truncated or malformed")
	ErrNotSnapshot  = errors.New("not a toolq sandbox snapshot")
	ErrVersion      = errors.New("unsupported snapshot version")
	ErrForeignBuild = errors.New("snapshot was made by a different quickjs.wasm build or runtime image")
	ErrSignature    = errors.New("snapshot signature mismatch")
	ErrUnknownKey   = errors.New("snapshot was signed with a key this worker does not hold")
)

// Key is a snapshot-signing key and its id.
type Key struct {
	ID  string
	Key []byte
}

// ValidKeyID reports whether id can name a key: 1 to 64 of [A-Za-z0-9._-].
func ValidKeyID(id string) bool {
	if id == "" || len(id) > MaxKeyIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c != '.' && c != '_' && c != '-' && (c < '0' || c > '9') && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') {
			return false
		}
	}
	return true
}

// Binding is what a snapshot belongs to: its run, session and step.
type Binding struct {
	RunID   string
	Session string
	Step    uint32
}

func (b Binding) String() string {
	return fmt.Sprintf("run %q of session %q, step %d", b.RunID, b.Session, b.Step)
}

func (b Binding) encode() []byte {
	out := make([]byte, 0, 8+len(b.RunID)+len(b.Session))
	out = binary.LittleEndian.AppendUint16(out, uint16(len(b.RunID))) //nolint:gosec // G115: Encode checks the lengths
	out = append(out, b.RunID...)
	out = binary.LittleEndian.AppendUint16(out, uint16(len(b.Session))) //nolint:gosec // G115: Encode checks the lengths
	out = append(out, b.Session...)
	return binary.LittleEndian.AppendUint32(out, b.Step)
}

func decodeBinding(b []byte) (Binding, bool) {
	var out Binding
	field := func() (string, bool) {
		if len(b) < 2 {
			return "", false
		}
		n := int(binary.LittleEndian.Uint16(b))
		if len(b) < 2+n {
			return "", false
		}
		s := string(b[2 : 2+n])
		b = b[2+n:]
		return s, true
	}
	var ok bool
	if out.RunID, ok = field(); !ok {
		return out, false
	}
	if out.Session, ok = field(); !ok {
		return out, false
	}
	if len(b) != 4 {
		return out, false
	}
	out.Step = binary.LittleEndian.Uint32(b)
	return out, true
}

// Snapshot is a decoded snapshot.
type Snapshot struct {
	Memory       []byte
	StackPointer uint32
	RuntimePtr   uint32
	ContextPtr   uint32
	Host         []byte
	// Binding is signed with the snapshot; Decode returns it for the
	// caller to compare with the run it restores.
	Binding Binding
	// KeyID names the key the snapshot was signed with (set by Decode).
	KeyID string
}

// Codec encodes and decodes snapshots for one wasm build and image. It is
// safe for concurrent use.
type Codec struct {
	sign      Key
	keys      map[string][]byte
	wasmSHA   [32]byte
	imageSHA  [32]byte
	image     []byte
	maxMemory int
	enc       *zstd.Encoder
	dec       *zstd.Decoder
}

// NewCodec returns a codec that signs with sign and verifies with sign and
// the older keys in verify. maxMemory bounds the memory a snapshot may hold.
func NewCodec(sign Key, verify []Key, wasmSHA, imageSHA [32]byte, image []byte, maxMemory int) (*Codec, error) {
	if maxMemory <= 0 || maxMemory > math.MaxUint32 {
		return nil, fmt.Errorf("snapshot: maxMemory %d out of range", maxMemory)
	}
	keys := map[string][]byte{}
	for _, k := range append([]Key{sign}, verify...) {
		if !ValidKeyID(k.ID) {
			return nil, fmt.Errorf("snapshot: key id %q: want 1 to %d of [A-Za-z0-9._-]", k.ID, MaxKeyIDBytes)
		}
		if len(k.Key) < 32 {
			return nil, fmt.Errorf("snapshot: key %q must hold at least 32 bytes", k.ID)
		}
		if _, dup := keys[k.ID]; dup {
			return nil, fmt.Errorf("snapshot: key id %q given twice", k.ID)
		}
		keys[k.ID] = append([]byte(nil), k.Key...)
	}
	n := runtime.GOMAXPROCS(0)
	// No frame checksum: the HMAC over the whole snapshot, checked before
	// the payload is decompressed, already stands for it (a frame without
	// one is read by every decoder, older builds' too). No entropy coding
	// of literals either: a delta's few KB of changed bytes gain 11 % from
	// Huffman tables that cost a third of the encode (0.30 → 0.20 ms
	// p50 in BenchmarkSnapshot); raw literals are plain zstd too.
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(n),
		zstd.WithLowerEncoderMem(true), zstd.WithEncoderCRC(false), zstd.WithNoEntropyCompression(true))
	if err != nil {
		return nil, err
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(n), zstd.WithDecoderMaxMemory(uint64(maxMemory)+64<<20))
	if err != nil {
		_ = enc.Close()
		return nil, err
	}
	return &Codec{
		sign: Key{ID: sign.ID, Key: keys[sign.ID]}, keys: keys, wasmSHA: wasmSHA, imageSHA: imageSHA, image: image,
		maxMemory: maxMemory, enc: enc, dec: dec,
	}, nil
}

// Close releases the compressors.
func (c *Codec) Close() {
	_ = c.enc.Close()
	c.dec.Close()
}

// Encode returns the signed snapshot, or ErrTooLarge when it exceeds max
// bytes (max ≤ 0: no bound).
func (c *Codec) Encode(s *Snapshot, max int) ([]byte, error) {
	if len(s.Memory)%pageSize != 0 || len(s.Memory) < len(c.image) {
		return nil, fmt.Errorf("snapshot memory of %d bytes is not a page multiple at least as large as the image", len(s.Memory))
	}
	memLen, hostLen := len(s.Memory), len(s.Host)
	if memLen > math.MaxUint32 || hostLen > math.MaxUint32 {
		return nil, fmt.Errorf("%w: memory of %d bytes, host state of %d bytes", ErrTooLarge, memLen, hostLen)
	}
	if len(s.Binding.RunID) > math.MaxUint16/4 || len(s.Binding.Session) > math.MaxUint16/4 {
		return nil, errors.New("snapshot: run id or session too long to bind")
	}
	bind := s.Binding.encode()
	buf := getBuf()
	defer putBuf(buf)
	raw := c.delta(*buf, s.Host, s.Memory)
	*buf = raw
	out := make([]byte, headerSize, headerSize+len(c.sign.ID)+len(bind)+len(raw)/8+macSize)
	copy(out[0:4], magic[:])
	out[4] = Version
	out[5] = byte(len(c.sign.ID))                             //nolint:gosec // G115: NewCodec checks the id is at most 64 bytes
	binary.LittleEndian.PutUint16(out[6:], uint16(len(bind))) //nolint:gosec // G115: bounded above
	copy(out[8:40], c.wasmSHA[:])
	copy(out[40:72], c.imageSHA[:])
	binary.LittleEndian.PutUint32(out[72:], uint32(memLen))
	binary.LittleEndian.PutUint32(out[76:], s.StackPointer)
	binary.LittleEndian.PutUint32(out[80:], s.RuntimePtr)
	binary.LittleEndian.PutUint32(out[84:], s.ContextPtr)
	binary.LittleEndian.PutUint32(out[88:], uint32(hostLen))
	out = append(out, c.sign.ID...)
	out = append(out, bind...)
	start := len(out)
	out = c.enc.EncodeAll(raw, out)
	body := len(out) - start
	if body > math.MaxUint32 {
		return nil, fmt.Errorf("%w: %d compressed bytes", ErrTooLarge, body)
	}
	binary.LittleEndian.PutUint32(out[92:], uint32(body)) //nolint:gosec // G115: checked against MaxUint32 above
	mac := hmac.New(sha256.New, c.sign.Key)
	mac.Write(out)
	out = mac.Sum(out)
	if max > 0 && len(out) > max {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(out), max)
	}
	return out, nil
}

// keyIDs lists the ids of the keys the codec verifies with, sorted.
func (c *Codec) keyIDs() string {
	ids := make([]string, 0, len(c.keys))
	for id := range c.keys {
		ids = append(ids, strconv.Quote(id))
	}
	sort.Strings(ids)
	return strings.Join(ids, ", ")
}

// SigningKeyID is the id of the key Encode signs with.
func (c *Codec) SigningKeyID() string { return c.sign.ID }

// delta appends host ‖ bitmap ‖ changed chunks XOR image to raw[:0].
func (c *Codec) delta(raw, host, mem []byte) []byte {
	chunks := len(mem) / chunkSize
	bitmapLen := (chunks + 7) / 8
	raw = append(raw[:0], host...)
	raw = append(raw, make([]byte, bitmapLen)...)
	bitmap := raw[len(host):]
	for i := range chunks {
		m := mem[i*chunkSize : (i+1)*chunkSize]
		var img []byte
		if (i+1)*chunkSize <= len(c.image) {
			img = c.image[i*chunkSize : (i+1)*chunkSize]
		} else {
			img = zeroChunk[:]
		}
		if bytes.Equal(m, img) {
			continue
		}
		bitmap[i/8] |= 1 << (i % 8)
		n := len(raw)
		raw = append(raw, zeroChunk[:]...)
		bitmap = raw[len(host) : len(host)+bitmapLen]
		subtle.XORBytes(raw[n:], m, img)
	}
	return raw
}

// Opened is a snapshot whose signature, header and payload have been
// checked and whose payload is decompressed, but whose memory has not been
// built: Apply writes it over the image. Release gives its buffer back.
type Opened struct {
	// MemorySize is the size of the snapshot's memory in bytes, a multiple
	// of 64 KiB, at least the image's and at most the codec's maximum.
	MemorySize   int
	StackPointer uint32
	RuntimePtr   uint32
	ContextPtr   uint32
	// Host is the host state; it lives in the buffer Release gives back.
	Host    []byte
	Binding Binding
	KeyID   string

	bitmap []byte // one bit a chunk of MemorySize
	data   []byte // the changed chunks, XORed with the image, in order
	buf    *[]byte
}

// Open verifies a snapshot of at most max bytes (max ≤ 0: no bound) and
// decompresses its payload: the HMAC is checked before anything else of it
// is read past the header, then every length against the others and the
// codec's bounds. It never panics on any input. The caller must Release
// the result.
func (c *Codec) Open(b []byte, max int) (*Opened, error) {
	if max > 0 && len(b) > max {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(b), max)
	}
	if len(b) < headerSize+macSize {
		return nil, ErrTruncated
	}
	if [4]byte(b[0:4]) != magic {
		return nil, ErrNotSnapshot
	}
	if b[4] != Version {
		return nil, fmt.Errorf("%w %d", ErrVersion, b[4])
	}
	if [32]byte(b[8:40]) != c.wasmSHA || [32]byte(b[40:72]) != c.imageSHA {
		return nil, ErrForeignBuild
	}
	body, sum := b[:len(b)-macSize], b[len(b)-macSize:]
	idLen, bindLen := int(b[5]), int(binary.LittleEndian.Uint16(b[6:]))
	if idLen == 0 || idLen > MaxKeyIDBytes || len(body) < headerSize+idLen+bindLen {
		return nil, ErrTruncated
	}
	keyID := string(body[headerSize : headerSize+idLen])
	key, ok := c.keys[keyID]
	if !ok {
		if !ValidKeyID(keyID) {
			return nil, ErrTruncated
		}
		return nil, fmt.Errorf("%w: key id %q (this worker holds %s)", ErrUnknownKey, keyID, c.keyIDs())
	}
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	if !hmac.Equal(mac.Sum(nil), sum) {
		return nil, fmt.Errorf("%w (key id %q)", ErrSignature, keyID)
	}
	bind, ok := decodeBinding(body[headerSize+idLen : headerSize+idLen+bindLen])
	if !ok {
		return nil, ErrTruncated
	}
	start := headerSize + idLen + bindLen
	memSize := int(binary.LittleEndian.Uint32(b[72:]))
	hostLen := int(binary.LittleEndian.Uint32(b[88:]))
	payloadLen := int(binary.LittleEndian.Uint32(b[92:]))
	if payloadLen != len(body)-start || memSize%pageSize != 0 || memSize < len(c.image) ||
		memSize > c.maxMemory || hostLen > c.maxMemory {
		return nil, ErrTruncated
	}
	// A page is 64 chunks: the bitmap has no bits past the last chunk.
	bitmapLen := memSize / chunkSize / 8
	buf := getBuf()
	raw, err := c.dec.DecodeAll(body[start:], (*buf)[:0])
	*buf = raw
	if err != nil || len(raw) < hostLen+bitmapLen {
		putBuf(buf)
		return nil, ErrTruncated
	}
	bitmap := raw[hostLen : hostLen+bitmapLen]
	dirty := 0
	for _, x := range bitmap {
		dirty += bits.OnesCount8(x)
	}
	if len(raw) != hostLen+bitmapLen+dirty*chunkSize {
		putBuf(buf)
		return nil, ErrTruncated
	}
	return &Opened{
		MemorySize:   memSize,
		StackPointer: binary.LittleEndian.Uint32(b[76:]),
		RuntimePtr:   binary.LittleEndian.Uint32(b[80:]),
		ContextPtr:   binary.LittleEndian.Uint32(b[84:]),
		Host:         raw[:hostLen:hostLen],
		Binding:      bind,
		KeyID:        keyID,
		bitmap:       bitmap,
		data:         raw[hostLen+bitmapLen:],
		buf:          buf,
	}, nil
}

// Apply writes the snapshot's memory into mem, which must be MemorySize
// bytes holding the codec's image followed by zeros: only the chunks that
// differ from the image are written (XORed in place).
func (o *Opened) Apply(mem []byte) error {
	if len(mem) != o.MemorySize || o.bitmap == nil {
		return fmt.Errorf("snapshot: apply %d bytes of memory to a snapshot of %d", len(mem), o.MemorySize)
	}
	data := o.data
	for j, x := range o.bitmap {
		for ; x != 0; x &= x - 1 {
			i := j*8 + bits.TrailingZeros8(x)
			m := mem[i*chunkSize : (i+1)*chunkSize]
			subtle.XORBytes(m, m, data[:chunkSize])
			data = data[chunkSize:]
		}
	}
	return nil
}

// Release gives the decompression buffer back; Host and Apply must not be
// used afterwards.
func (o *Opened) Release() {
	if o.buf != nil {
		putBuf(o.buf)
		o.buf, o.bitmap, o.data, o.Host = nil, nil, nil, nil
	}
}

// Decode verifies and decodes a snapshot of at most max bytes (max ≤ 0: no
// bound), building its whole memory. It never panics on any input.
func (c *Codec) Decode(b []byte, max int) (*Snapshot, error) {
	o, err := c.Open(b, max)
	if err != nil {
		return nil, err
	}
	defer o.Release()
	mem := make([]byte, o.MemorySize)
	copy(mem, c.image)
	if err := o.Apply(mem); err != nil {
		return nil, err
	}
	return &Snapshot{
		StackPointer: o.StackPointer,
		RuntimePtr:   o.RuntimePtr,
		ContextPtr:   o.ContextPtr,
		Host:         bytes.Clone(o.Host),
		Memory:       mem,
		Binding:      o.Binding,
		KeyID:        o.KeyID,
	}, nil
}

// bufs are the buffers of snapshot payloads (a delta being compressed, a
// payload decompressed), reused between snapshots. One past bufMax is left
// to the garbage collector rather than kept.
var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 128<<10); return &b }}

const bufMax = 4 << 20

func getBuf() *[]byte { return bufs.Get().(*[]byte) } //nolint:forcetypeassert // the pool holds only *[]byte

func putBuf(b *[]byte) {
	if cap(*b) <= bufMax {
		*b = (*b)[:0]
		bufs.Put(b)
	}
}
