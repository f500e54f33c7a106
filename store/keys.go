package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Key layout of the Badger store. Every key is readable text; the parts that
// come from callers (context ids, task ids, stream names, KV namespaces and
// keys) are escaped so that they never contain '/', so a prefix always names
// exactly one entity. Numbers are zero-padded decimal of fixed width, so the
// byte order of keys is the numeric order (most significant digit first).
//
//	msg/<contextId>/<seq:20>            one message of a history (JSON)
//	msgh/<contextId>                    history head: first and last live seq (16 bytes)
//	agent/<contextId>                   agent metadata (JSON)
//	task/<taskId>                       task record (JSON); Badger TTL = ExpiresAt
//	tidx/all/<created:19>/<taskId>      every task, by creation time   } value: task summary
//	tidx/ctx/<contextId>/<created:19>/<taskId>  tasks of a context     } (JSON), same TTL
//	tidx/agent/<agentId>/<created:19>/<taskId>  tasks of an agent      } as the record
//	tidx/owner/<owner>/<created:19>/<taskId>    tasks of a principal   }
//	tidx/id/<taskId>                    where the task is indexed (JSON), same TTL
//	evt/<stream>/<seq:20>               one event log record (raw bytes)
//	evth/<stream>                       event log head: last seq, expiry, floor (16 or 24 bytes); kept for ever
//	evtx/<deadline:20>/<stream>         a stream to sweep once its deadline (Unix seconds) passed (empty value)
//	conva/<lastActive:19>/<contextId>   a conversation by last activity (empty value), written with its agent record
//	meta/convindex                      present once conva/ holds an entry for every agent record
//	convx/<contextId>                   an expired conversation whose messages up to this seq are to delete (8 bytes)
//	kv/<namespace>/<key>                a plugin's key-value space (raw bytes)
//	lease/<key>                         a lease (JSON loop.Lease), no TTL: a lapsed one stays until taken or released
//	spacex/flush                        written and dropped at once by a reclaim of space (reclaim.go); never read
//
// <created:19> is the task's CreatedAt in Unix nanoseconds (clamped at 0).
// History seqs are never reused: Replace writes the new history after the
// old one and moves the head, so a reader never sees half of a swap.
const (
	pfxMsg        = "msg/"
	pfxMsgHead    = "msgh/"
	pfxAgent      = "agent/"
	pfxTask       = "task/"
	pfxTaskIdx    = "tidx/"
	pfxEvt        = "evt/"
	pfxEvtHead    = "evth/"
	pfxEvtSweep   = "evtx/"
	pfxKV         = "kv/"
	seqWidth      = 20 // digits of a max uint64
	timeWidth     = 19 // digits of a max int64
	idxAll        = "all"
	idxContext    = "ctx"
	idxAgent      = "agent"
	idxOwner      = "owner"
	idxID         = "id"
	headSize      = 16
	headFloorSize = 24
	maxHeadTime   = 1<<63 - 1
)

// escape makes s safe as one component of a key: '%', '/' and control bytes
// become %XX. Ordinary ids come back unchanged, without allocating.
func escape(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if needsEscape(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) {
			b = append(b, '%', hex[c>>4], hex[c&15])
			continue
		}
		b = append(b, c)
	}
	return string(b)
}

func needsEscape(c byte) bool { return c == '/' || c == '%' || c < 0x20 || c == 0x7f }

// unescape reverses escape.
func unescape(s string) (string, error) {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			b = append(b, c)
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("truncated escape at offset %d", i)
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("bad escape %q at offset %d", s[i:i+3], i)
		}
		b = append(b, byte(v))
		i += 2
	}
	return string(b), nil
}

// appendSeq appends seq as seqWidth zero-padded digits.
func appendSeq(b []byte, seq uint64) []byte {
	var d [seqWidth]byte
	for i := seqWidth - 1; i >= 0; i-- {
		d[i] = byte('0' + seq%10)
		seq /= 10
	}
	return append(b, d[:]...)
}

func appendTime(b []byte, ns uint64) []byte {
	var d [timeWidth]byte
	for i := timeWidth - 1; i >= 0; i-- {
		d[i] = byte('0' + ns%10)
		ns /= 10
	}
	return append(b, d[:]...)
}

var errSeqKey = errors.New("not a sequence key")

// parseSeqKey returns the sequence number at the end of a msg/ or evt/ key
// whose prefix (up to and including the last '/') is prefix.
func parseSeqKey(key []byte, prefix string) (uint64, error) {
	if len(key) != len(prefix)+seqWidth || string(key[:len(prefix)]) != prefix {
		return 0, fmt.Errorf("%w: %q", errSeqKey, key)
	}
	var v uint64
	for _, c := range key[len(prefix):] {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: %q", errSeqKey, key)
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, fmt.Errorf("%w: %q overflows", errSeqKey, key)
		}
		v = v*10 + d
	}
	return v, nil
}

// timeKey is t as non-negative Unix nanoseconds, the order of task listings.
func timeKey(t time.Time) uint64 {
	if t.IsZero() || t.Before(time.Unix(0, 0)) {
		return 0
	}
	if t.After(time.Unix(0, maxHeadTime)) {
		return maxHeadTime
	}
	return uint64(t.UnixNano())
}

func msgPrefix(ctxID string) []byte { return []byte(pfxMsg + escape(ctxID) + "/") }
func msgKey(prefix []byte, seq uint64) []byte {
	return appendSeq(append(make([]byte, 0, len(prefix)+seqWidth), prefix...), seq)
}
func msgHeadKey(ctxID string) []byte { return []byte(pfxMsgHead + escape(ctxID)) }
func agentKey(ctxID string) []byte   { return []byte(pfxAgent + escape(ctxID)) }
func taskKey(id string) []byte       { return []byte(pfxTask + escape(id)) }
func evtPrefix(stream string) []byte { return []byte(pfxEvt + escape(stream) + "/") }
func evtHeadKey(stream string) []byte {
	return []byte(pfxEvtHead + escape(stream))
}

// sweepKey is the entry of the expiry index that has the sweeper delete
// the records of stream once deadline (Unix seconds) has passed.
func sweepKey(deadline uint64, stream string) []byte {
	b := make([]byte, 0, len(pfxEvtSweep)+seqWidth+1+len(stream))
	b = appendSeq(append(b, pfxEvtSweep...), deadline)
	b = append(b, '/')
	return append(b, escape(stream)...)
}

// parseSweepKey returns the deadline and the stream of an expiry index key.
func parseSweepKey(key []byte) (deadline uint64, stream string, err error) {
	n := len(pfxEvtSweep)
	if len(key) < n+seqWidth+2 || string(key[:n]) != pfxEvtSweep || key[n+seqWidth] != '/' {
		return 0, "", fmt.Errorf("not an expiry index key: %q", key)
	}
	if deadline, err = parseSeqKey(key[:n+seqWidth], pfxEvtSweep); err != nil {
		return 0, "", err
	}
	stream, err = unescape(string(key[n+seqWidth+1:]))
	if err == nil && stream == "" {
		err = fmt.Errorf("expiry index key without stream: %q", key)
	}
	return deadline, stream, err
}

func kvKey(ns, key string) []byte { return []byte(pfxKV + escape(ns) + "/" + escape(key)) }

// taskIdxPrefix is the prefix of one task index: tidx/all/ or
// tidx/<kind>/<value>/.
func taskIdxPrefix(kind, value string) []byte {
	if kind == idxAll {
		return []byte(pfxTaskIdx + idxAll + "/")
	}
	return []byte(pfxTaskIdx + kind + "/" + escape(value) + "/")
}

func taskIdxKey(prefix []byte, created uint64, id string) []byte {
	b := make([]byte, 0, len(prefix)+timeWidth+1+len(id))
	b = append(b, prefix...)
	b = appendTime(b, created)
	b = append(b, '/')
	return append(b, escape(id)...)
}

// parseTaskIdxKey returns the creation time and the task id at the end of
// an index key.
func parseTaskIdxKey(key []byte, prefix []byte) (created uint64, id string, err error) {
	if len(key) < len(prefix)+timeWidth+2 || string(key[:len(prefix)]) != string(prefix) || key[len(prefix)+timeWidth] != '/' {
		return 0, "", fmt.Errorf("not a task index key: %q", key)
	}
	for _, c := range key[len(prefix) : len(prefix)+timeWidth] {
		if c < '0' || c > '9' {
			return 0, "", fmt.Errorf("not a task index key: %q", key)
		}
		created = created*10 + uint64(c-'0')
	}
	id, err = unescape(string(key[len(prefix)+timeWidth+1:]))
	if err == nil && id == "" {
		err = fmt.Errorf("task index key without id: %q", key)
	}
	return created, id, err
}

// head is the head record of a history or event stream: for a history, the
// first and last live seqs (empty when first > last); for a stream, the last
// seq (kept for ever: ids never go back, see BadgerEvents.Expire), the Unix
// second at which the stream's records expire (0: never) and c, the floor:
// the records up to it are gone. A head without a floor is 16 bytes (as
// before streams had one), one with a floor 24.
type head struct{ a, b, c uint64 }

func (h head) encode() []byte {
	n := headSize
	if h.c != 0 {
		n = headFloorSize
	}
	v := make([]byte, n)
	binary.BigEndian.PutUint64(v, h.a)
	binary.BigEndian.PutUint64(v[8:], h.b)
	if h.c != 0 {
		binary.BigEndian.PutUint64(v[16:], h.c)
	}
	return v
}

func decodeHead(v []byte) (head, error) {
	switch len(v) {
	case headSize:
		return head{a: binary.BigEndian.Uint64(v), b: binary.BigEndian.Uint64(v[8:])}, nil
	case headFloorSize:
		h := head{a: binary.BigEndian.Uint64(v), b: binary.BigEndian.Uint64(v[8:]), c: binary.BigEndian.Uint64(v[16:])}
		if h.c == 0 || h.c > h.a {
			return head{}, fmt.Errorf("head record with floor %d and last seq %d", h.c, h.a)
		}
		return h, nil
	}
	return head{}, fmt.Errorf("head record is %d bytes, want %d or %d", len(v), headSize, headFloorSize)
}
