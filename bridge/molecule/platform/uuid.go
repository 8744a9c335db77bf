package platform

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
)

// NewUUID returns a random (version 4) UUID. crypto/rand.Read never fails (Go 1.24+).
func NewUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	return formatUUID(b)
}

// replyNamespace is the UUID namespace of reply ids: 517503d5-339f-4fa2-b6b8-f81d3d8bbf2f, drawn
// at random once for codex-warm. Changing it changes every reply id.
var replyNamespace = [16]byte{0x51, 0x75, 0x03, 0xd5, 0x33, 0x9f, 0x4f, 0xa2, 0xb6, 0xb8, 0xf8, 0x1d, 0x3d, 0x8b, 0xbf, 0x2f}

// ReplyID identifies the reply to activity activityID of workspace ws: a name-based (version 5)
// UUID of "<ws>/<activity id>" (a workspace id has no "/"). It is the same on every delivery
// attempt and in every run, also when codex answers the row again after a crash, so the platform
// (Idempotency-Key) and a peer (A2A messageId) can drop a copy they already have. SHA-1 is what
// RFC 9562 prescribes for version 5; the id is not a secret.
func ReplyID(ws, activityID string) string {
	h := sha1.New()
	h.Write(replyNamespace[:])
	h.Write([]byte(ws + "/" + activityID))
	var b [16]byte
	copy(b[:], h.Sum(nil))
	b[6] = b[6]&0x0f | 0x50 // version 5
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	return formatUUID(b)
}

func formatUUID(b [16]byte) string {
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}
