// Package snapshot encodes and decodes signed, compressed VM snapshots: the
// linear memory of a QuickJS VM as a delta against the clean post-init image,
// its registers and the host's bookkeeping.
//
// Layout (integers little-endian):
//
//	0   4  magic "TQJS"
//	4   1  version (1)
//	5   3  reserved, zero
//	8   32 sha256 of the quickjs.wasm build
//	40  32 sha256 of the post-init image
//	72  4  memory size in bytes (a multiple of 64 KiB)
//	76  4  stack pointer
//	80  4  runtime pointer
//	84  4  context pointer
//	88  4  host state length
//	92  4  payload length
//	96  n  payload: zstd(host state ‖ chunk bitmap ‖ changed chunks)
//	…   32 HMAC-SHA256 of everything before it
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
	"runtime"

	"github.com/klauspost/compress/zstd"
)

// Version is the format version written by Encode.
const Version = 1

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
)

// Snapshot is a decoded snapshot.
type Snapshot struct {
	Memory       []byte
	StackPointer uint32
	RuntimePtr   uint32
	ContextPtr   uint32
	Host         []byte
}

// Codec encodes and decodes snapshots for one wasm build and image. It is
// safe for concurrent use.
type Codec struct {
	key       []byte
	wasmSHA   [32]byte
	imageSHA  [32]byte
	image     []byte
	maxMemory int
	enc       *zstd.Encoder
	dec       *zstd.Decoder
}

// NewCodec returns a codec. maxMemory bounds the memory a snapshot may hold.
func NewCodec(key []byte, wasmSHA, imageSHA [32]byte, image []byte, maxMemory int) (*Codec, error) {
	if maxMemory <= 0 || maxMemory > math.MaxUint32 {
		return nil, fmt.Errorf("snapshot: maxMemory %d out of range", maxMemory)
	}
	n := runtime.GOMAXPROCS(0)
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(n),
		zstd.WithLowerEncoderMem(true))
	if err != nil {
		return nil, err
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(n), zstd.WithDecoderMaxMemory(uint64(maxMemory)+64<<20))
	if err != nil {
		_ = enc.Close()
		return nil, err
	}
	return &Codec{
		key: append([]byte(nil), key...), wasmSHA: wasmSHA, imageSHA: imageSHA, image: image,
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
	raw := c.delta(s.Host, s.Memory)
	out := make([]byte, headerSize, headerSize+len(raw)/8+macSize)
	copy(out[0:4], magic[:])
	out[4] = Version
	copy(out[8:40], c.wasmSHA[:])
	copy(out[40:72], c.imageSHA[:])
	binary.LittleEndian.PutUint32(out[72:], uint32(memLen))
	binary.LittleEndian.PutUint32(out[76:], s.StackPointer)
	binary.LittleEndian.PutUint32(out[80:], s.RuntimePtr)
	binary.LittleEndian.PutUint32(out[84:], s.ContextPtr)
	binary.LittleEndian.PutUint32(out[88:], uint32(hostLen))
	out = c.enc.EncodeAll(raw, out)
	body := len(out) - headerSize
	if body > math.MaxUint32 {
		return nil, fmt.Errorf("%w: %d compressed bytes", ErrTooLarge, body)
	}
	binary.LittleEndian.PutUint32(out[92:], uint32(body))
	mac := hmac.New(sha256.New, c.key)
	mac.Write(out)
	out = mac.Sum(out)
	if max > 0 && len(out) > max {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(out), max)
	}
	return out, nil
}

// delta returns host ‖ bitmap ‖ changed chunks XOR image.
func (c *Codec) delta(host, mem []byte) []byte {
	chunks := len(mem) / chunkSize
	bitmapLen := (chunks + 7) / 8
	raw := make([]byte, len(host)+bitmapLen, len(host)+bitmapLen+64*chunkSize)
	copy(raw, host)
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

// Decode verifies and decodes a snapshot of at most max bytes (max ≤ 0: no
// bound). It never panics on any input.
func (c *Codec) Decode(b []byte, max int) (*Snapshot, error) {
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
	mac := hmac.New(sha256.New, c.key)
	mac.Write(body)
	if !hmac.Equal(mac.Sum(nil), sum) {
		return nil, ErrSignature
	}
	memSize := int(binary.LittleEndian.Uint32(b[72:]))
	hostLen := int(binary.LittleEndian.Uint32(b[88:]))
	payloadLen := int(binary.LittleEndian.Uint32(b[92:]))
	if payloadLen != len(body)-headerSize || memSize%pageSize != 0 || memSize < len(c.image) ||
		memSize > c.maxMemory || hostLen > c.maxMemory {
		return nil, ErrTruncated
	}
	chunks := memSize / chunkSize
	bitmapLen := (chunks + 7) / 8
	raw, err := c.dec.DecodeAll(body[headerSize:], make([]byte, 0, hostLen+bitmapLen+memSize/8))
	if err != nil || len(raw) < hostLen+bitmapLen {
		return nil, ErrTruncated
	}
	bitmap := raw[hostLen : hostLen+bitmapLen]
	dirty := 0
	for i := range chunks {
		if bitmap[i/8]&(1<<(i%8)) != 0 {
			dirty++
		}
	}
	if len(raw) != hostLen+bitmapLen+dirty*chunkSize {
		return nil, ErrTruncated
	}
	mem := make([]byte, memSize)
	copy(mem, c.image)
	data := raw[hostLen+bitmapLen:]
	for i := range chunks {
		if bitmap[i/8]&(1<<(i%8)) == 0 {
			continue
		}
		m := mem[i*chunkSize : (i+1)*chunkSize]
		subtle.XORBytes(m, m, data[:chunkSize])
		data = data[chunkSize:]
	}
	s := &Snapshot{
		StackPointer: binary.LittleEndian.Uint32(b[76:]),
		RuntimePtr:   binary.LittleEndian.Uint32(b[80:]),
		ContextPtr:   binary.LittleEndian.Uint32(b[84:]),
		Host:         raw[:hostLen:hostLen],
		Memory:       mem,
	}
	return s, nil
}
