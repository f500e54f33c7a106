package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/looopy-go/looopy/loop"
)

// ExpireConversations deletes the conversations (agent record a:<ctx>
// and history m:<ctx>) whose last activity is before idleBefore and that
// have no unfinished task, and returns their ids. It reads the members of
// the index by last activity (ca) scored before idleBefore, not every
// conversation. Each is deleted, with its index member, in one MULTI/EXEC
// under WATCH of its agent record, its history and its task index
// (ti:c:<ctx>): a turn or a task that touched any of them between the
// check and the delete aborts it, and the conversation is kept. A
// conversation is thus whole or gone, whatever dies when.
//
// Agent records written before the index existed (or by a host of an
// older version) have no member: the first expiry of each Store adds
// theirs (backfillConvIndex), so none stays undeletable for good.
func (s *Store) ExpireConversations(ctx context.Context, idleBefore time.Time) ([]string, error) {
	if err := ctxErr(ctx, "expire conversations"); err != nil {
		return nil, err
	}
	if err := s.backfillConvIndex(ctx); err != nil {
		return nil, err
	}
	var gone []string
	max := strconv.FormatInt(idleBefore.UnixMilli(), 10)
	var offset int64 // members kept so far: the next page starts after them
	for {
		ids, err := s.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: s.convIdxKey(), ByScore: true, Start: "-inf", Stop: max, Offset: offset, Count: 500}).Result()
		if err != nil {
			return gone, wrap("expire conversations", err)
		}
		if convListed != nil {
			convListed(len(ids))
		}
		for _, id := range ids {
			out, err := s.expireConversation(ctx, id, idleBefore, false)
			if err != nil {
				return gone, err
			}
			switch out {
			case convDeleted:
				gone = append(gone, id)
			case convKept:
				offset++
			}
		}
		if len(ids) < 500 {
			return gone, nil
		}
	}
}

// convListed, when set (tests), is called with the number of index
// members each page of the expiry read.
var convListed func(n int)

type convOutcome int

const (
	convKept      convOutcome = iota // still in the index
	convDeleted                      // deleted with its member
	convUnindexed                    // a stale member removed or moved
	convMissing                      // no agent record (DeleteConversation)
)

// DeleteConversation deletes the conversation contextID (agent record,
// history, index member) now, whatever its last activity, unless it has
// an unfinished task: then it returns false and deletes nothing. It is
// one MULTI/EXEC under WATCH, as the expiry's. Without an agent record it
// returns a *loop.NotFoundError (its history is deleted all the same).
func (s *Store) DeleteConversation(ctx context.Context, contextID string) (bool, error) {
	if err := s.checkID("context id", contextID); err != nil {
		return false, fmt.Errorf("delete conversation: %w", err)
	}
	if err := ctxErr(ctx, "delete conversation"); err != nil {
		return false, err
	}
	for range 16 { // touched meanwhile: decided again
		out, err := s.expireConversation(ctx, contextID, time.Time{}, true)
		switch {
		case err != nil:
			return false, err
		case out == convDeleted:
			return true, nil
		case out == convMissing:
			return false, &loop.NotFoundError{What: "conversation", ID: contextID}
		case out == convKept:
			return false, nil // an unfinished task
		}
	}
	return false, fmt.Errorf("delete conversation %q: %w", contextID, loop.ErrBusy)
}

// expireConversation deletes one conversation if it is idle since before
// cutoff (or, now, whatever its activity) without an unfinished task. A
// member that names no record is removed, one whose score is not its
// record's is set to the record's.
func (s *Store) expireConversation(ctx context.Context, id string, cutoff time.Time, now bool) (convOutcome, error) {
	ak, mk, ik, ck := s.agentKey(id), s.msgKey(id), s.p+"ti:c:"+id, s.convIdxKey()
	out := convKept
	err := s.rdb.Watch(ctx, func(tx *redis.Tx) error {
		v, err := tx.Get(ctx, ak).Bytes()
		missing := isNil(err)
		if missing && now {
			err = nil // its history, if any, is deleted (below)
		}
		if isNil(err) {
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.ZRem(ctx, ck, id)
				return nil
			})
			if err == nil {
				out = convUnindexed
			}
			return err
		}
		if err != nil {
			return err
		}
		var m loop.AgentMetadata
		if !missing && json.Unmarshal(v, &m) != nil && !now {
			return nil // a damaged record stays for a reader to report
		}
		score, err := tx.ZScore(ctx, ck, id).Result()
		if err != nil && !isNil(err) {
			return err
		}
		if want := convScore(&m); !now && (isNil(err) || score != want) {
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.ZAdd(ctx, ck, redis.Z{Score: want, Member: id})
				return nil
			})
			if err == nil {
				out = convUnindexed
			}
			return err
		}
		last := m.LastActivity
		if m.CreatedAt.After(last) {
			last = m.CreatedAt
		}
		if !now && !last.Before(cutoff) {
			return nil
		}
		members, err := tx.ZRange(ctx, ik, 0, -1).Result()
		if err != nil {
			return err
		}
		for _, mem := range members {
			tid := memberID(mem)
			vals, err := tx.HMGet(ctx, s.taskKey(tid), "v", "d").Result()
			if err != nil {
				return err
			}
			t, ok, err := s.decodeTask(tid, vals)
			if err != nil || (ok && !t.Status.Terminal()) {
				return nil // unfinished (or unreadable: kept rather than lost)
			}
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Del(ctx, ak, mk)
			p.ZRem(ctx, ck, id)
			if now {
				// The entry the host removes once the rest of the
				// conversation is deleted (PendingConversationDeletes).
				p.HSet(ctx, s.convDeleteKey(), id, time.Now().UnixNano())
			}
			return nil
		})
		if err == nil {
			out = convDeleted
			if missing {
				out = convMissing
			}
		}
		return err
	}, ak, mk, ik)
	if errors.Is(err, redis.TxFailedErr) {
		return convUnindexed, nil // touched meanwhile: active again, kept (its member moved)
	}
	if err != nil {
		return convKept, wrap(fmt.Sprintf("expire conversation %q", id), err)
	}
	return out, nil
}

// backfillConvIndex adds the index member of every agent record that has
// none (ZADD NX: a member a turn set meanwhile is not moved back), once
// per Store: one SCAN over the agent records, 500 at a time.
func (s *Store) backfillConvIndex(ctx context.Context) error {
	if s.convIdxBuilt.Load() {
		return nil
	}
	prefix := s.p + "a:"
	var cursor uint64
	for {
		keys, next, err := s.rdb.Scan(ctx, cursor, escapeGlob(prefix)+"*", 500).Result()
		if err != nil {
			return wrap("index conversations", err)
		}
		if len(keys) > 0 {
			vals, err := s.rdb.MGet(ctx, keys...).Result()
			if err != nil {
				return wrap("index conversations", err)
			}
			var zs []redis.Z
			for i, v := range vals {
				str, ok := v.(string)
				var m loop.AgentMetadata
				if !ok || json.Unmarshal([]byte(str), &m) != nil {
					continue // gone meanwhile, or damaged: for a reader to report
				}
				zs = append(zs, redis.Z{Score: convScore(&m), Member: strings.TrimPrefix(keys[i], prefix)})
			}
			if len(zs) > 0 {
				if err := s.rdb.ZAddNX(ctx, s.convIdxKey(), zs...).Err(); err != nil {
					return wrap("index conversations", err)
				}
			}
		}
		if cursor = next; cursor == 0 {
			s.convIdxBuilt.Store(true)
			return nil
		}
	}
}

// escapeGlob escapes the glob characters of s for SCAN MATCH.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, c := range s {
		switch c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// convDeleteKey is the hash of the deletions of conversations to finish:
// context id → the time of its DeleteConversation (Unix nanoseconds).
func (s *Store) convDeleteKey() string { return s.p + "convdel" }

// PendingConversationDeletes returns the conversations whose deletion
// (DeleteConversation, which enters them in its MULTI/EXEC) is not
// finished, each with the time of its deletion.
func (s *Store) PendingConversationDeletes(ctx context.Context) (map[string]time.Time, error) {
	m, err := s.rdb.HGetAll(ctx, s.convDeleteKey()).Result()
	if err != nil {
		return nil, wrap("pending conversation deletes", err)
	}
	out := make(map[string]time.Time, len(m))
	for id, v := range m {
		at := time.Now()
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			at = time.Unix(0, n)
		}
		out[id] = at
	}
	return out, nil
}

// ConversationDeleteDone removes the entry of a conversation whose
// deletion is finished.
func (s *Store) ConversationDeleteDone(ctx context.Context, contextID string) error {
	if err := s.rdb.HDel(ctx, s.convDeleteKey(), contextID).Err(); err != nil {
		return wrap(fmt.Sprintf("conversation delete done %q", contextID), err)
	}
	return nil
}
