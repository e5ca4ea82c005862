package snapshot

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
)

func hmacSum(b []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(b)
	return m.Sum(nil)
}

func leUint32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

func leUint16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }
