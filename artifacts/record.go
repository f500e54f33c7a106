package artifacts

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
)

// Key layout in Badger (every key of the package starts with "art"):
//
//	art/<artifactId>/meta                 the artifact's Info (JSON record)
//	art/<artifactId>/part/<0000000000>    part n: inline bytes or a blob reference
//	artctx/<contextId>/<artifactId>       index by context (empty value)
//	arttask/<taskId>/<artifactId>         index by task (empty value)
//	artexp/<unix nanoseconds>/<artifactId> expiry index (empty value)
//	artdel/<artifactId>                   deletion begun, not finished (empty value)
//
// Context and task ids are path-escaped, so a "/" in them cannot make one
// prefix match another's keys.
func metaKey(id string) []byte    { return []byte("art/" + id + "/meta") }
func partPrefix(id string) []byte { return []byte("art/" + id + "/part/") }
func partKey(id string, n int) []byte {
	return fmt.Appendf(nil, "art/%s/part/%010d", id, n)
}
func ctxPrefix(contextID string) []byte { return []byte("artctx/" + url.PathEscape(contextID) + "/") }
func taskPrefix(taskID string) []byte   { return []byte("arttask/" + url.PathEscape(taskID) + "/") }
func ctxKey(contextID, id string) []byte {
	return append(ctxPrefix(contextID), id...)
}
func taskKey(taskID, id string) []byte { return append(taskPrefix(taskID), id...) }

var (
	expPrefix = []byte("artexp/")
	delPrefix = []byte("artdel/")
)

func delKey(id string) []byte { return append(append([]byte(nil), delPrefix...), id...) }

func expKey(unixNano int64, id string) []byte {
	return fmt.Appendf(nil, "artexp/%020d/%s", unixNano, id)
}

// metaRecord is the stored form of an artifact's Info.
type metaRecord struct {
	V int `json:"v"`
	Info
	// Deleting marks an artifact whose deletion has begun: it is invisible
	// and the next DeleteTask, Delete or Sweep finishes the job.
	Deleting bool `json:"deleting,omitempty"`
}

const metaVersion = 1

func encodeMeta(m metaRecord) ([]byte, error) {
	m.V = metaVersion
	return json.Marshal(m)
}

// decodeMeta parses a stored meta record and checks that it makes sense.
func decodeMeta(b []byte) (metaRecord, error) {
	var m metaRecord
	if err := json.Unmarshal(b, &m); err != nil {
		return m, err
	}
	switch {
	case m.V != metaVersion:
		return m, fmt.Errorf("unknown record version %d", m.V)
	case !ValidID(m.ID):
		return m, fmt.Errorf("bad id %q", m.ID)
	case !m.Kind.valid():
		return m, fmt.Errorf("bad kind %q", m.Kind)
	case !m.Status.valid():
		return m, fmt.Errorf("bad status %q", m.Status)
	case m.Parts < 0 || m.Size < 0 || m.Rows < 0 || m.Version < 0:
		return m, errors.New("negative count")
	case m.Kind == KindDataset:
		if err := validateSchema(m.Schema); err != nil {
			return m, err
		}
	case m.Kind == KindData && m.Parts > 1:
		return m, errors.New("a data artifact has at most one part")
	}
	return m, nil
}

// part is one stored part: its bytes inline, or a reference to a blob.
type part struct {
	Inline []byte
	Blob   string // blob key; "" when inline
	Size   int64
	Rows   int // rows in a dataset batch
}

// Part record format (all integers unsigned varints):
//
//	byte 0     format version (1)
//	byte 1     0: inline, 1: blob
//	rows       dataset rows in the part (0 for files and data)
//	inline:    the bytes, to the end of the record
//	blob:      size, key length, key
const partVersion = 1

func encodePart(p part) []byte {
	b := make([]byte, 0, 2+2*binary.MaxVarintLen64+len(p.Inline)+len(p.Blob))
	b = append(b, partVersion)
	if p.Blob == "" {
		b = append(b, 0)
		b = binary.AppendUvarint(b, uint64(p.Rows))
		return append(b, p.Inline...)
	}
	b = append(b, 1)
	b = binary.AppendUvarint(b, uint64(p.Rows))
	b = binary.AppendUvarint(b, uint64(p.Size))
	b = binary.AppendUvarint(b, uint64(len(p.Blob)))
	return append(b, p.Blob...)
}

// decodePart parses a part record. The inline bytes alias b.
func decodePart(b []byte) (part, error) {
	var p part
	if len(b) < 3 {
		return p, errors.New("part record too short")
	}
	if b[0] != partVersion {
		return p, fmt.Errorf("unknown part record version %d", b[0])
	}
	kind := b[1]
	rest := b[2:]
	rows, n := binary.Uvarint(rest)
	if n <= 0 || rows > 1<<31 {
		return p, errors.New("bad row count")
	}
	p.Rows = int(rows)
	rest = rest[n:]
	switch kind {
	case 0:
		p.Inline = rest
		p.Size = int64(len(rest))
		return p, nil
	case 1:
		size, n := binary.Uvarint(rest)
		if n <= 0 || size > 1<<50 {
			return p, errors.New("bad blob size")
		}
		rest = rest[n:]
		kl, n := binary.Uvarint(rest)
		if n <= 0 || kl == 0 || kl != uint64(len(rest)-n) {
			return p, errors.New("bad blob key length")
		}
		key := string(rest[n:])
		if err := checkBlobKey(key); err != nil {
			return p, err
		}
		p.Blob, p.Size = key, int64(size)
		return p, nil
	}
	return p, fmt.Errorf("unknown part kind %d", kind)
}
