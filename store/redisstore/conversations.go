package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/looopy-go/looopy/loop"
)

// ExpireConversations looks at every conversation (one SCAN over the agent
// records, so none is left out for others that are kept) and deletes
// those (agent record a:<ctx> and history m:<ctx>) whose last activity is before idleBefore and that have
// no unfinished task, and returns their ids. Each is deleted in one
// MULTI/EXEC under WATCH of its agent record, its history and its task
// index (ti:c:<ctx>): a turn or a task that touched any of them between
// the check and the delete aborts it, and the conversation is kept. A
// conversation is thus whole or gone, whatever dies when.
func (s *Store) ExpireConversations(ctx context.Context, idleBefore time.Time) ([]string, error) {
	if err := ctxErr(ctx, "expire conversations"); err != nil {
		return nil, err
	}
	var gone []string
	prefix := s.p + "a:"
	var cursor uint64
	for {
		keys, next, err := s.rdb.Scan(ctx, cursor, escapeGlob(prefix)+"*", 500).Result()
		if err != nil {
			return gone, wrap("expire conversations", err)
		}
		for _, k := range keys {
			id := strings.TrimPrefix(k, prefix)
			ok, err := s.expireConversation(ctx, id, idleBefore)
			if err != nil {
				return gone, err
			}
			if ok {
				gone = append(gone, id)
			}
		}
		if cursor = next; cursor == 0 {
			return gone, nil
		}
	}
}

// expireConversation deletes one conversation if it is idle since before
// cutoff without an unfinished task.
func (s *Store) expireConversation(ctx context.Context, id string, cutoff time.Time) (bool, error) {
	ak, mk, ik := s.agentKey(id), s.msgKey(id), s.p+"ti:c:"+id
	deleted := false
	err := s.rdb.Watch(ctx, func(tx *redis.Tx) error {
		v, err := tx.Get(ctx, ak).Bytes()
		if isNil(err) {
			return nil
		}
		if err != nil {
			return err
		}
		var m loop.AgentMetadata
		if json.Unmarshal(v, &m) != nil {
			return nil // a damaged record stays for a reader to report
		}
		last := m.LastActivity
		if m.CreatedAt.After(last) {
			last = m.CreatedAt
		}
		if !last.Before(cutoff) {
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
			return nil
		})
		if err == nil {
			deleted = true
		}
		return err
	}, ak, mk, ik)
	if errors.Is(err, redis.TxFailedErr) {
		return false, nil // touched meanwhile: active again, kept
	}
	if err != nil {
		return false, wrap(fmt.Sprintf("expire conversation %q", id), err)
	}
	return deleted, nil
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
