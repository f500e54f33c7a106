package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/looopy-go/looopy/loop"
)

var (
	_ loop.MultiStreamAppender = (*Events)(nil)
	_ loop.EventCommitter      = (*Events)(nil)
)

// streamKeys checks the names of the streams an append writes (valid,
// distinct) and returns their keys.
func (e *Events) streamKeys(op string, names func(i int) string, n int) ([]string, error) {
	if n == 0 {
		return nil, fmt.Errorf("%s: %w: no streams", op, loop.ErrInvalid)
	}
	keys := make([]string, n)
	seen := make(map[string]bool, n)
	for i := range n {
		name := names(i)
		if err := e.s.checkID("stream name", name); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		if seen[name] {
			return nil, fmt.Errorf("%s to %q: %w: stream named twice", op, name, loop.ErrInvalid)
		}
		seen[name] = true
		keys[i] = e.s.evtKey(name)
	}
	return keys, nil
}

// withLastKeys returns the keys of the streams of one of sa or ca, then
// their last-id keys (the layout of append_streams).
func (e *Events) withLastKeys(sa []loop.StreamAppend, ca []loop.CommitAppend) []string {
	names := make([]string, 0, len(sa)+len(ca))
	for _, a := range sa {
		names = append(names, a.Stream)
	}
	for _, a := range ca {
		names = append(names, a.Stream)
	}
	keys := make([]string, 2*len(names))
	for i, n := range names {
		keys[i], keys[len(names)+i] = e.s.evtKey(n), e.s.evtLastKey(n)
	}
	return keys
}

// appendRecords adds to args, for one stream, the counts of its records
// before and after a turn's end, then the records.
func appendRecords(args []any, before, after [][]byte) []any {
	args = append(args, strconv.Itoa(len(before)), strconv.Itoa(len(after)))
	for _, recs := range [2][][]byte{before, after} {
		for _, d := range recs {
			if d == nil {
				d = []byte{}
			}
			args = append(args, d)
		}
	}
	return args
}

// firstSeqs reads the first id of each stream an append script answered
// (an empty string, read as 0, for a stream it appended nothing to).
func firstSeqs(keys []string, ids []any) ([]uint64, error) {
	if len(ids) != len(keys) {
		return nil, fmt.Errorf("the server answered %d first ids for %d streams", len(ids), len(keys))
	}
	first := make([]uint64, len(keys))
	for i, v := range ids {
		id, _ := v.(string)
		if id == "" {
			continue
		}
		seq, err := parseSeq(keys[i], id)
		if err != nil {
			return nil, err
		}
		first[i] = seq
	}
	return first, nil
}

// AppendStreams implements loop.MultiStreamAppender: the records of every
// stream in one script, one step on the server, so an event of a sub-task
// is in its task's stream and its context's, or in neither, and costs one
// round trip.
func (e *Events) AppendStreams(ctx context.Context, appends []loop.StreamAppend) ([]uint64, error) {
	const op = "append events"
	keys, err := e.streamKeys(op, func(i int) string { return appends[i].Stream }, len(appends))
	if err != nil {
		return nil, err
	}
	args := make([]any, 0, 4*len(appends))
	for _, a := range appends {
		if len(a.Data) == 0 {
			return nil, fmt.Errorf("%s to %q: %w: no records", op, a.Stream, loop.ErrInvalid)
		}
		args = appendRecords(args, a.Data, nil)
	}
	if err := ctxErr(ctx, op); err != nil {
		return nil, err
	}
	ids, err := appendStreamsScript.Run(ctx, e.s.rdb, e.withLastKeys(appends, nil), args...).Slice()
	if err != nil {
		return nil, wrap(op, err)
	}
	return firstSeqs(keys, ids)
}

// Commits implements loop.EventCommitter: a commit of this log's own Store
// (or of a wrapper passing its commits on to it).
func (e *Events) Commits(tc loop.TurnCommitter) bool {
	for i := 0; i < 8 && tc != nil; i++ {
		if s, ok := tc.(*Store); ok {
			return s == e.s
		}
		u, ok := tc.(loop.CommitterUnwrapper)
		if !ok {
			return false
		}
		tc = u.UnwrapCommitter()
	}
	return false
}

// AppendCommit implements loop.EventCommitter: the records before a turn's
// end, the turn's commit (CommitTurn's script) and the end's records in one
// script, so the end is never in the log without the commit it announces,
// nor the reverse, whatever stops between them (a kill of the host, a lost
// connection). A refused commit (lease lost, task version) appends the
// records before it and none of the end.
func (e *Events) AppendCommit(ctx context.Context, appends []loop.CommitAppend, c loop.TurnCommit) (first []uint64, commitErr, err error) {
	op := fmt.Sprintf("append commit of %q", c.ContextID)
	keys, err := e.streamKeys(op, func(i int) string { return appends[i].Stream }, len(appends))
	if err != nil {
		return nil, nil, err
	}
	cop := fmt.Sprintf("commit turn of %q", c.ContextID)
	args, cerr := e.s.commitArgs(cop, c, 1)
	if cerr != nil {
		// A commit that cannot be written (a record over the store's
		// limits): the records before it go alone, as when refused.
		var before []loop.StreamAppend
		idx := make([]int, 0, len(appends))
		for i, a := range appends {
			if len(a.Before) > 0 {
				before = append(before, loop.StreamAppend{Stream: a.Stream, Data: a.Before})
				idx = append(idx, i)
			}
		}
		first = make([]uint64, len(appends))
		if len(before) > 0 {
			f, err := e.AppendStreams(ctx, before)
			if err != nil {
				return nil, nil, err
			}
			for j, i := range idx {
				first[i] = f[j]
			}
		}
		return first, cerr, nil
	}
	args[0] = strconv.Itoa(len(args) - 1)
	for _, a := range appends {
		args = appendRecords(args, a.Before, a.After)
	}
	if err := ctxErr(ctx, op); err != nil {
		return nil, nil, err
	}
	res, err := appendCommitScript.Run(ctx, e.s.rdb, e.withLastKeys(nil, appends), args...).Slice()
	if err != nil {
		return nil, nil, wrap(op, err)
	}
	if len(res) < 2 {
		return nil, nil, fmt.Errorf("%s: unexpected reply %v", op, res)
	}
	first, err = firstSeqs(keys, res[2:])
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", op, err)
	}
	return first, commitResult(cop, c, res), nil
}
