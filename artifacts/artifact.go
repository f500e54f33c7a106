package artifacts

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/looopy-go/looopy/loop"
)

// Kind is the type of an artifact.
type Kind string

// The three kinds of artifact.
const (
	// KindFile is text or binary content built from appended chunks.
	KindFile Kind = "file"
	// KindData is a JSON object replaced atomically; every write is a new version.
	KindData Kind = "data"
	// KindDataset is a table: rows appended in batches, checked against a
	// schema of named, typed columns.
	KindDataset Kind = "dataset"
)

func (k Kind) valid() bool { return k == KindFile || k == KindData || k == KindDataset }

// Status is where an artifact is in its lifecycle: building, then complete
// or failed. Only a building artifact can be written to.
type Status string

// Lifecycle states.
const (
	StatusBuilding Status = "building"
	StatusComplete Status = "complete"
	StatusFailed   Status = "failed"
)

func (s Status) valid() bool {
	return s == StatusBuilding || s == StatusComplete || s == StatusFailed
}

// Column types of a dataset schema.
const (
	TypeString  = "string"
	TypeNumber  = "number"
	TypeInteger = "integer"
	TypeBoolean = "boolean"
	TypeDate    = "date" // "2006-01-02" or RFC 3339
	TypeJSON    = "json" // any JSON value
)

// Spec describes an artifact to create.
type Spec struct {
	// ID is optional: empty means a new, time-ordered id ("art-…").
	// A given id must match [A-Za-z0-9._:-]{1,128}.
	ID          string
	Kind        Kind
	TaskID      string // required
	ContextID   string // required
	Owner       string // principal that may read it; "" = anyone who may read the context
	Name        string
	Description string
	MimeType    string              // files; default text/plain (text) or application/octet-stream (binary)
	Binary      bool                // files: chunks are bytes, sent base64 in events
	Schema      *loop.DatasetSchema // datasets: required
	Metadata    map[string]any
}

// Info is what is known of an artifact, without its content.
type Info struct {
	ID          string              `json:"id"`
	Kind        Kind                `json:"kind"`
	TaskID      string              `json:"taskId"`
	ContextID   string              `json:"contextId"`
	Owner       string              `json:"owner,omitempty"`
	Name        string              `json:"name,omitempty"`
	Description string              `json:"description,omitempty"`
	MimeType    string              `json:"mimeType"`
	Binary      bool                `json:"binary,omitempty"`
	Schema      *loop.DatasetSchema `json:"schema,omitempty"`
	Status      Status              `json:"status"`
	Error       string              `json:"error,omitempty"` // why it failed
	// Parts counts chunks (file) or batches (dataset); a data artifact has
	// one part once written.
	Parts int `json:"parts"`
	// Size is the content's size in bytes as Open streams it (file bytes,
	// the data's JSON, the dataset's JSON lines).
	Size int64 `json:"size"`
	// Rows counts a dataset's rows.
	Rows int64 `json:"rows,omitempty"`
	// Version grows by one with every change of content (a chunk or batch
	// appended, a part replaced, an object written); for a data artifact
	// it is the number of writes (1 after the first).
	Version     int            `json:"version"`
	CreatedAt   time.Time      `json:"createdAt"`
	UpdatedAt   time.Time      `json:"updatedAt"`
	CompletedAt time.Time      `json:"completedAt,omitzero"`
	ExpiresAt   time.Time      `json:"expiresAt,omitzero"` // zero: never
	Metadata    map[string]any `json:"metadata,omitempty"`
}

// ReadableBy reports whether principal may read the artifact: anyone when
// it has no owner, else its owner only. The host adds its own rules (the
// context's owner, admin scopes) on top.
func (i Info) ReadableBy(principal string) bool { return i.Owner == "" || i.Owner == principal }

// ContentType is the MIME type of what Open streams: the file's MIME type,
// application/json for data, application/x-ndjson for a dataset.
func (i Info) ContentType() string {
	switch i.Kind {
	case KindData:
		return "application/json"
	case KindDataset:
		return "application/x-ndjson"
	}
	return i.MimeType
}

// Scope is who writes: the task, context and principal of a turn. Writers
// refuse to touch an artifact of another scope.
type Scope struct {
	ContextID string
	TaskID    string
	Owner     string
}

// Check returns ErrForeign (wrapped) unless the artifact belongs to s.
// An artifact of another context or principal reads, and matches, as not
// found (get artifact: ErrNotFound, as a store answers for a missing id):
// a writer, a model or a plugin trying ids must not learn that an id
// exists elsewhere. One of another task of the same conversation (which
// list_artifacts shows the model anyway) says so.
func (s Scope) Check(i Info) error {
	if i.ContextID != s.ContextID || (i.Owner != "" && i.Owner != s.Owner) {
		return fmt.Errorf("get artifact: %w", &foreignError{id: i.ID, hidden: true})
	}
	if i.TaskID != s.TaskID {
		return &foreignError{id: i.ID}
	}
	return nil
}

type foreignError struct {
	id     string
	hidden bool // reads as not found
}

func (e *foreignError) Error() string {
	if e.hidden {
		return notFound(e.id).Error()
	}
	return "artifact " + `"` + e.id + `"` + " belongs to another task of this conversation"
}
func (e *foreignError) Is(target error) bool {
	return target == ErrForeign || (e.hidden && (target == ErrNotFound || target == loop.ErrNotFound))
}

// NewID returns a new artifact id: "art-" and 24 hex digits (milliseconds
// since the epoch, a per-process counter, random bits), so ids made by one
// process sort by creation time.
func NewID() string {
	var b [12]byte
	ms := uint64(time.Now().UnixMilli())
	for i := range 6 {
		b[i] = byte(ms >> (40 - 8*i))
	}
	n := idCounter.Add(1)
	b[6], b[7] = byte(n>>8), byte(n)
	_, _ = rand.Read(b[8:])
	return "art-" + hex.EncodeToString(b[:])
}

var idCounter atomic.Uint32

// ValidID reports whether id can name an artifact.
func ValidID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range []byte(id) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return id != "." && id != ".."
}

// validate checks a spec and returns it with defaults filled in.
func (s Spec) validate() (Spec, error) {
	if !s.Kind.valid() {
		return s, invalid("unknown kind %q (want file, data or dataset)", s.Kind)
	}
	if s.ID != "" && !ValidID(s.ID) {
		return s, invalid("bad artifact id %q: use 1 to 128 of A-Z a-z 0-9 . _ : -", s.ID)
	}
	if s.TaskID == "" || s.ContextID == "" {
		return s, invalid("an artifact needs a task id and a context id")
	}
	if !utf8.ValidString(s.Name) || len(s.Name) > 1024 {
		return s, invalid("name must be UTF-8 text of at most 1024 bytes")
	}
	if s.MimeType != "" && (len(s.MimeType) > 255 || !strings.Contains(s.MimeType, "/") || strings.ContainsAny(s.MimeType, "\r\n")) {
		return s, invalid("bad MIME type %q", s.MimeType)
	}
	switch s.Kind {
	case KindFile:
		if s.Schema != nil {
			return s, invalid("a file artifact takes no schema")
		}
		if s.MimeType == "" {
			s.MimeType = "text/plain; charset=utf-8"
			if s.Binary {
				s.MimeType = "application/octet-stream"
			}
		}
	case KindData:
		if s.Schema != nil || s.Binary {
			return s, invalid("a data artifact takes no schema and is not binary")
		}
		s.MimeType = "application/json"
	case KindDataset:
		if s.Binary {
			return s, invalid("a dataset is not binary")
		}
		if err := validateSchema(s.Schema); err != nil {
			return s, err
		}
		s.MimeType = "application/x-ndjson"
	}
	return s, nil
}
