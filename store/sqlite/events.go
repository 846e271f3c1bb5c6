package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batonhq/baton"
)

// Append assigns the chat's next sequences to events and applies u in the
// same transaction; see baton.EventStore. The writer is the only goroutine
// that writes and it reads last_sequence inside the transaction, so two
// appends can neither repeat nor skip a sequence; another process that
// opens the same file serialises on BEGIN IMMEDIATE.
func (s *Store) Append(ctx context.Context, scope baton.Scope, chatID string, events []baton.Event, u *baton.ChatUpdate) ([]baton.Event, error) {
	a, err := prepareAppend(scope, chatID, events, u, time.Now())
	if err != nil {
		return nil, err
	}
	// The writer runs a with the other appends of its batch (bulkAppend);
	// appendAlone runs it alone when they cannot be.
	fn := func(ctx context.Context, w *wconn) error { return appendAlone(ctx, w, a) }
	if err := s.submit(ctx, &request{ctx: ctx, fn: fn, app: a, done: make(chan error, 1)}); err != nil {
		return nil, err
	}
	return a.evs, nil
}

// prepareAppend checks an append and returns it ready for the writer.
func prepareAppend(scope baton.Scope, chatID string, events []baton.Event, u *baton.ChatUpdate, now time.Time) (*appendReq, error) {
	evs, err := baton.PrepareEvents(chatID, events)
	if err != nil {
		return nil, err
	}
	if err := u.Validate(); err != nil {
		return nil, err
	}
	extras := make([]any, len(evs))
	for i, e := range evs {
		x, err := e.Metadata.ExtraJSON()
		if err != nil {
			return nil, baton.Errorf(baton.EINVALID, "events[%d].metadata: %w", i, err)
		}
		if x != nil {
			extras[i] = string(x)
		}
	}
	return &appendReq{scope: scope, chatID: chatID, evs: evs, extras: extras, u: u, now: now}, nil
}

// appendAlone runs a in the writer's open transaction, one statement per
// event: the path of an append the writer cannot run in bulk.
func appendAlone(ctx context.Context, w *wconn, a *appendReq) error {
	scope, chatID, evs, u := a.scope, a.chatID, a.evs, a.u
	last, err := bumpSeq(ctx, w, scope, chatID, len(evs), a.now)
	if err != nil {
		return err
	}
	seq := last - int64(len(evs))
	if u != nil && u.ExpectNext > 0 && seq+1 != u.ExpectNext {
		return baton.StaleNext(chatID, u.ExpectNext, seq) // rolled back with the bump
	}
	for i := range evs {
		seq++
		e := &evs[i]
		var payload any
		if len(e.Payload) > 0 {
			payload = string(e.Payload)
		}
		md := &e.Metadata
		_, err := w.exec(ctx, `INSERT INTO events (chat_id, sequence, id, type, ts, agent_id, agent_name, env_name, source, extra, payload)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			chatID, seq, e.ID, e.Type, e.Timestamp, md.TriggerAgentID, md.TriggerAgentName, md.EnvName, md.Source, a.extras[i], payload)
		if isUnique(err) {
			return baton.Errorf(baton.ECONFLICT, "event %q: already recorded in chat %q", e.ID, chatID)
		}
		if err != nil {
			return storeErr("append", err)
		}
		e.Sequence = seq
	}
	if u == nil {
		return nil
	}
	if err := applyUpdate(ctx, w, chatID, u, a.now, len(evs) == 0); err != nil {
		return err
	}
	return updateUsage(ctx, w, scope, chatID, u, a.now)
}

// CreateChatAndAppend creates c, keeps keep and makes the chat's first
// append in one commit; see baton.CreateAppender.
func (s *Store) CreateChatAndAppend(ctx context.Context, scope baton.Scope, c baton.Chat, keep *baton.Event, events []baton.Event, u *baton.ChatUpdate) (baton.Chat, []baton.Event, error) {
	in, u, err := baton.PrepareCreateAndAppend(scope, &c, keep, u)
	if err != nil {
		return baton.Chat{}, nil, err
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	a, err := prepareAppend(scope, c.ID, events, u, now)
	if err != nil {
		return baton.Chat{}, nil, err
	}
	c.CreatedAt, c.UpdatedAt = now, now
	pending := c.Pending
	c.Pending = nil
	err = s.write(ctx, func(ctx context.Context, w *wconn) error {
		if err := insertChat(ctx, w, c, pending, now); err != nil {
			return err
		}
		if in != nil {
			var consumed any
			if in.Taken {
				consumed = micros(now) // kept as taken: it never waits in the inbox
			}
			if _, err := w.exec(ctx, `INSERT INTO inputs (chat_id, id, type, event, accepted_at, consumed_at) VALUES (?, ?, ?, ?, ?, ?)`,
				c.ID, in.Event.ID, in.Event.Type, string(in.JSON), micros(now), consumed); err != nil {
				return storeErr("add input", err)
			}
		}
		return appendAlone(ctx, w, a)
	})
	if err != nil {
		return baton.Chat{}, nil, err
	}
	out, err := baton.CreatedWith(withPending(c, pending, now), len(a.evs), u, now)
	return out, a.evs, err
}

// Events returns the chat's events after the given sequence; see
// baton.EventStore.
func (s *Store) Events(ctx context.Context, scope baton.Scope, chatID string, after int64, limit int) ([]baton.Event, error) {
	if s.closed.Load() {
		return nil, baton.ErrClosed
	}
	// The first query reads the chat's last sequence, which checks the
	// scope and sizes the result, with the first block of events: the
	// events of a chat have the sequences 1 … last, no gap, so the block
	// (after, after+min(eventsBlock, limit)] holds the first of them.
	after = max(after, 0)
	to := after + eventsBlock
	if limit > 0 {
		to = after + min(eventsBlock, int64(limit))
	}
	var last sql.NullInt64
	var packed sql.NullString
	var count int64
	s.reads.Add(1)
	if err := s.r.firstEvents.QueryRowContext(ctx, bigEvent, after, to, chatID, scope.App, scope.User).Scan(&last, &packed, &count); err != nil {
		return nil, s.readErr("events", err)
	}
	if !last.Valid {
		return nil, notFound(chatID)
	}
	n := max(0, last.Int64-after)
	if limit > 0 {
		n = min(n, int64(limit))
	}
	out := make([]baton.Event, 0, n)
	for first := true; len(out) < int(n); first = false {
		// A block of eventsBlock events at a time.
		from := after + int64(len(out))
		to := min(from+eventsBlock, after+n)
		if !first {
			s.reads.Add(1)
			if err := s.r.events.QueryRowContext(ctx, bigEvent, chatID, scope.App, scope.User, from, to).Scan(&packed, &count); err != nil {
				return nil, s.readErr("events", err)
			}
		}
		if count != to-from {
			// Deleted since the read of its last sequence: all or nothing.
			return nil, notFound(chatID)
		}
		start := len(out)
		var err error
		if out, err = unpackEvents(out, packed.String, chatID); err != nil {
			return nil, err
		}
		if int64(len(out)-start) < count {
			// The block's large events, which the packed string left out.
			s.reads.Add(1)
			rows, err := s.r.bigEvents.QueryContext(ctx, chatID, scope.App, scope.User, from, to, bigEvent)
			if err != nil {
				return nil, s.readErr("events", err)
			}
			for rows.Next() {
				var p string
				if err := rows.Scan(&p); err != nil {
					rows.Close()
					return nil, s.readErr("events", err)
				}
				if out, err = unpackEvents(out, p, chatID); err != nil {
					rows.Close()
					return nil, err
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return nil, s.readErr("events", err)
			}
			if int64(len(out)-start) != count {
				return nil, notFound(chatID)
			}
		}
		// group_concat without an ORDER BY of its own (a sorter that made
		// the read a third slower) takes the rows in the order of the index
		// it scans, (chat_id, sequence), but SQLite does not promise it, and
		// the large events come apart: the order is checked here.
		if block := out[start:]; !slices.IsSortedFunc(block, bySequence) {
			slices.SortFunc(block, bySequence)
		}
	}
	return out, nil
}

// unpackEvents appends to out the events packed back to back in p.
func unpackEvents(out []baton.Event, p, chatID string) ([]baton.Event, error) {
	for p != "" {
		out = append(out, baton.Event{})
		e := &out[len(out)-1]
		var extra string
		var err error
		if p, extra, err = unpackEvent(p, e); err != nil {
			return out, storeErr("events", err)
		}
		if extra != "" {
			if err := e.Metadata.SetExtraJSON([]byte(extra)); err != nil {
				return out, storeErr("events metadata", err)
			}
		}
		e.Metadata.TriggerSessionID = chatID
	}
	return out, nil
}

func bySequence(a, b baton.Event) int { return cmp.Compare(a.Sequence, b.Sequence) }

// Events reads at most eventsBlock events in one string, and of them only
// those of at most bigEvent bytes (payload and extra metadata): the string
// is built in SQLite's own memory, so it is kept to a few MiB; larger
// events are read one row each.
const (
	eventsBlock = 256
	bigEvent    = 16 << 10
)

// packedEventCols selects an event as one value: "seq ts len1 … len8 ",
// then eight texts back to back (their lengths in bytes: id, type, agent
// id, agent name, env name, source, payload, extra metadata), which
// unpackEvent takes apart. Events reads a block of them as one string
// (group_concat): modernc.org/sqlite takes a mutex three times and
// allocates for every column of every row, so ten columns per event cost a
// replay 14 allocations per event, one packed column per event 3, and a
// block per 256 events 2 (the event's texts and its payload); a 136-message
// chat resumed in 0.81–0.91 ms instead of 1.0–1.1 (BenchmarkResume100). A
// block holds only events of at most bigEvent bytes, so that SQLite, which
// builds the string in its own memory, never builds one larger than 4 MiB
// (nor near its 1 GB limit on a value); larger events come one row each.
const packedEventCols = `concat(e.sequence, ' ', e.ts, ' ', octet_length(e.id), ' ', octet_length(e.type), ' ',
	octet_length(e.agent_id), ' ', octet_length(e.agent_name), ' ', octet_length(e.env_name), ' ',
	octet_length(e.source), ' ', ifnull(octet_length(e.payload), 0), ' ', ifnull(octet_length(e.extra), 0), ' ',
	e.id, e.type, e.agent_id, e.agent_name, e.env_name, e.source, e.payload, e.extra)`

// unpackEvent fills e from the packedEventCols value at the start of p and
// returns the rest of p and the event's extra metadata (a substring of p).
// The event's strings and payload are copies.
func unpackEvent(p string, e *baton.Event) (rest, extra string, err error) {
	var n [10]int64
	for i := range n {
		j := strings.IndexByte(p, ' ')
		if j < 0 {
			return "", "", errors.New("malformed packed event")
		}
		v, err := strconv.ParseInt(p[:j], 10, 64)
		if err != nil {
			return "", "", fmt.Errorf("malformed packed event: %w", err)
		}
		n[i], p = v, p[j+1:]
	}
	e.Sequence, e.Timestamp = n[0], n[1]
	total := int64(0)
	for _, l := range n[2:] {
		if l < 0 || l > int64(len(p))-total {
			return "", "", errors.New("malformed packed event")
		}
		total += l
	}
	// The six texts share one copy, so that an event kept does not keep
	// the whole block alive.
	texts := strings.Clone(p[:total-n[8]-n[9]])
	p = p[len(texts):]
	md := &e.Metadata
	for i, f := range [...]*string{&e.ID, &e.Type, &md.TriggerAgentID, &md.TriggerAgentName, &md.EnvName, &md.Source} {
		*f, texts = texts[:n[2+i]], texts[n[2+i]:]
	}
	if n[8] > 0 {
		e.Payload = json.RawMessage(p[:n[8]])
	}
	p = p[n[8]:]
	return p[n[9]:], p[:n[9]], nil
}
