package artifacts

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
)

// Budget of stored bytes per owner. Each owner (the principal of the turn
// that wrote an artifact) has a usage record, "artuse/<owner>", the sum of
// the bytes its stored artifacts hold: every write that makes an artifact
// larger adds to it in the same transaction as the artifact's record, and
// is refused (*BudgetError, nothing of the write kept) when the sum would
// pass Config.OwnerBudget; a delete, an expiry's sweep and an abandon give
// the bytes back in the transaction that makes the artifact invisible or
// empty. Each record keeps what it has added (Charged), so a count is
// never given back twice and artifacts written before the budget existed
// are counted at their next write. The usage lives with the records (in
// Badger, or in the shared KV of several hosts), so it survives restarts
// and every host sees the same sum.

// ErrBudget: a write that would take its owner's stored artifacts past
// Config.OwnerBudget. The error is a *BudgetError.
var ErrBudget = errors.New("artifact storage budget exceeded")

// BudgetError reports a write refused by the owner's artifact budget. It
// matches ErrBudget.
type BudgetError struct {
	Owner  string // the principal ("" when auth is off)
	Used   int64  // bytes its stored artifacts hold
	Need   int64  // bytes the write adds
	Budget int64  // Config.OwnerBudget
}

func (e *BudgetError) Error() string {
	who := fmt.Sprintf("principal %q", e.Owner)
	if e.Owner == "" {
		who = "the anonymous principal"
	}
	return fmt.Sprintf("%v (ARTIFACT_BUDGET_EXCEEDED): %s stores %d bytes of artifacts, this write adds %d, its budget is %d bytes (limits.artifactBytesPerPrincipal); delete artifacts or conversations to make room",
		ErrBudget, who, e.Used, e.Need, e.Budget)
}

// Is makes errors.Is(err, ErrBudget) true.
func (e *BudgetError) Is(target error) bool { return target == ErrBudget }

func usageKey(owner string) []byte { return []byte("artuse/" + url.PathEscape(owner)) }

// usage reads owner's stored bytes in tx (0 when no record).
func usage(tx kvTxn, owner string) (int64, error) {
	b, err := tx.get(usageKey(owner), nil)
	if errors.Is(err, errNoKey) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("artifact usage of %q: bad record %q", owner, b)
	}
	return n, nil
}

// account moves what m adds to its owner's usage to target bytes (its
// size, or 0 when it goes away), in tx, and records it in m (the caller
// saves m in tx). Growth past the budget is refused when enforce is set;
// giving bytes back never is.
func (d *DB) account(tx kvTxn, m *metaRecord, target int64, enforce bool) error {
	delta := target - m.Charged
	if delta == 0 {
		return nil
	}
	used, err := usage(tx, m.Owner)
	if err != nil {
		return err
	}
	if enforce && delta > 0 && d.budget > 0 && used+delta > d.budget {
		return &BudgetError{Owner: m.Owner, Used: used, Need: delta, Budget: d.budget}
	}
	used = max(used+delta, 0)
	m.Charged = target
	if used == 0 {
		return tx.del(usageKey(m.Owner))
	}
	return tx.set(usageKey(m.Owner), strconv.AppendInt(nil, used, 10))
}

// fits refuses, before a part of n bytes is written to a blob, a write
// that the budget would refuse at its commit: a blob is not written for
// nothing. The commit checks again.
func (d *DB) fits(tx kvTxn, m metaRecord, n int64) error {
	if d.budget <= 0 {
		return nil
	}
	used, err := usage(tx, m.Owner)
	if err != nil {
		return err
	}
	if need := m.Size - m.Charged + n; need > 0 && used+need > d.budget {
		return &BudgetError{Owner: m.Owner, Used: used, Need: need, Budget: d.budget}
	}
	return nil
}

// Usage returns the bytes owner's stored artifacts hold, as counted
// against Config.OwnerBudget.
func (d *DB) Usage(owner string) (int64, error) {
	var n int64
	err := d.kv.view(func(tx kvTxn) error {
		var err error
		n, err = usage(tx, owner)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("artifact usage of %q: %w", owner, err)
	}
	return n, nil
}
