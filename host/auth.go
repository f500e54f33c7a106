package host

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"strings"

	"github.com/looopy-go/looopy/loop"
)

// authenticator maps a credential to its principal. With auth off every
// request is the principal DefaultPrincipal.
type authenticator struct {
	enabled bool
	keys    []keyEntry
	admin   [32]byte // sha256 of the admin token
	hasAdm  bool
}

type keyEntry struct {
	sum       [32]byte
	principal string
	scopes    []string
}

func newAuthenticator(ac AuthConfig, adm AdminConfig) (*authenticator, error) {
	a := &authenticator{enabled: ac.Enabled}
	for i, k := range ac.Keys {
		v, err := resolveSecret(k.Key)
		if err != nil {
			return nil, fmt.Errorf("auth.keys[%d]: %w", i, err)
		}
		a.keys = append(a.keys, keyEntry{sum: sha256.Sum256([]byte(v)), principal: k.Principal, scopes: k.Scopes})
	}
	if adm.Token != "" {
		v, err := resolveSecret(adm.Token)
		if err != nil {
			return nil, fmt.Errorf("admin.token: %w", err)
		}
		a.admin, a.hasAdm = sha256.Sum256([]byte(v)), true
	}
	return a, nil
}

// credential returns the token of a request: "Authorization: Bearer X" or
// "X-API-Key: X".
func credential(authorization, apiKey string) string {
	if apiKey != "" {
		return apiKey
	}
	if v, ok := cutPrefixFold(authorization, "Bearer "); ok {
		return strings.TrimSpace(v)
	}
	return ""
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return "", false
}

// principal resolves a credential. Every key is compared, in constant
// time, so the time taken says nothing about which key came close.
func (a *authenticator) principal(token string) (*loop.AuthContext, error) {
	if !a.enabled {
		return &loop.AuthContext{Principal: DefaultPrincipal}, nil
	}
	if token == "" {
		return nil, fmt.Errorf("%w: no credential (Authorization: Bearer or X-API-Key)", ErrUnauthenticated)
	}
	sum := sha256.Sum256([]byte(token))
	var found *keyEntry
	for i := range a.keys {
		if subtle.ConstantTimeCompare(sum[:], a.keys[i].sum[:]) == 1 {
			found = &a.keys[i]
		}
	}
	if found == nil {
		return nil, fmt.Errorf("%w: unknown credential", ErrUnauthenticated)
	}
	return &loop.AuthContext{Principal: found.principal, Token: token, Scopes: found.scopes}, nil
}

// adminOK reports whether token is the admin credential. With no admin
// token configured the admin API is closed.
func (a *authenticator) adminOK(token string) bool {
	if !a.hasAdm || token == "" {
		return false
	}
	sum := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(sum[:], a.admin[:]) == 1
}
