package store

import (
	"slices"
	"time"
)

// memConvIndex is the in-memory store's index of conversations by last
// activity: each conversation is in the bucket of the minute of its last
// activity, and the buckets present are kept in order, so the expiry
// looks at the buckets older than its cutoff only. Not safe for
// concurrent use: Memory holds agentMu around it.
type memConvIndex struct {
	at      map[string]int64              // context id → its bucket
	buckets map[int64]map[string]struct{} // bucket → context ids
	order   []int64                       // the buckets present, ascending
}

const memConvBucket = int64(time.Minute)

func newMemConvIndex() *memConvIndex {
	return &memConvIndex{at: map[string]int64{}, buckets: map[int64]map[string]struct{}{}}
}

func memBucket(t time.Time) int64 { return int64(timeKey(t)) / memConvBucket }

// put files id under the minute of last.
func (x *memConvIndex) put(id string, last time.Time) {
	b := memBucket(last)
	if old, ok := x.at[id]; ok {
		if old == b {
			return
		}
		x.remove(id)
	}
	x.at[id] = b
	set := x.buckets[b]
	if set == nil {
		set = map[string]struct{}{}
		x.buckets[b] = set
		i, _ := slices.BinarySearch(x.order, b)
		x.order = slices.Insert(x.order, i, b)
	}
	set[id] = struct{}{}
}

func (x *memConvIndex) remove(id string) {
	b, ok := x.at[id]
	if !ok {
		return
	}
	delete(x.at, id)
	set := x.buckets[b]
	delete(set, id)
	if len(set) == 0 {
		delete(x.buckets, b)
		if i, found := slices.BinarySearch(x.order, b); found {
			x.order = slices.Delete(x.order, i, i+1)
		}
	}
}

// before returns the ids in the buckets that begin before cutoff: the
// candidates (the last bucket may hold some active since cutoff).
func (x *memConvIndex) before(cutoff time.Time) []string {
	end := int64(timeKey(cutoff))
	var out []string
	for _, b := range x.order {
		if b*memConvBucket >= end {
			break
		}
		for id := range x.buckets[b] {
			out = append(out, id)
		}
	}
	return out
}
