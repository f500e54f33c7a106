package loop

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Context ids are chosen by clients, so two principals may pick the same
// one. The host keeps each principal's conversations apart by storing
// them under a scoped id: the client's id behind a prefix derived from the
// principal. Clients never see the prefix; everything inside the host
// (stores, event streams, the events' contextId) uses the scoped id.

// contextScopeMark opens a scoped id. A client's own context id may not
// start with it, so a scoped id is never mistaken for a client's.
const contextScopeMark = "~"

// ContextScope returns the prefix of principal's scoped context ids.
func ContextScope(principal string) string {
	sum := sha256.Sum256([]byte(principal))
	return contextScopeMark + hex.EncodeToString(sum[:8]) + contextScopeMark
}

// ScopedContextID is the id under which the host keeps principal's
// conversation contextID. The empty id stays empty (a new conversation).
func ScopedContextID(principal, contextID string) string {
	if contextID == "" {
		return ""
	}
	return ContextScope(principal) + contextID
}

// ClientContextID returns the id a client knows for a context id of the
// host: the scoped prefix removed, any other id as it is.
func ClientContextID(id string) string {
	const n = 2*len(contextScopeMark) + 16
	if len(id) < n || id[0] != contextScopeMark[0] || id[n-1] != contextScopeMark[0] {
		return id
	}
	for i := 1; i < n-1; i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return id
		}
	}
	return id[n:]
}

// ValidClientContextID reports whether a client may name a context id:
// not one that looks scoped.
func ValidClientContextID(id string) bool { return !strings.HasPrefix(id, contextScopeMark) }
