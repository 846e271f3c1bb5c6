package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/batonhq/baton"
)

// TestHubFrameReuse: the hub's frames go back to a pool once every stream
// is done with them. Streams that read every frame (and check that it is
// still the event it was queued as, while the hub reuses released frames
// for later events), one that is cut off, and one that ends mid-way must
// each see their own events, whole; the race detector sees any frame
// reused while a stream still holds it.
func TestHubFrameReuse(t *testing.T) {
	h := newHub(nil, quietLogger(), 1, 64)
	const chatID, n = "c1", 20000
	readers := make([]*subscriber, 3)
	for i := range readers {
		s, err := h.subscribe(chatID, nil)
		if err != nil {
			t.Fatal(err)
		}
		readers[i] = s
	}
	stuck, _ := h.subscribe(chatID, nil) // never reads: cut off when its queue fills
	quitter, _ := h.subscribe(chatID, nil)

	var wg sync.WaitGroup
	check := func(name string, s *subscriber, upTo int64) {
		last := int64(0)
		for last < upTo {
			f := nextFrame(s)
			if f == nil {
				t.Errorf("%s: kicked after sequence %d", name, last)
				return
			}
			want := `"content":"` + strconv.FormatInt(f.seq, 10) + `"`
			if f.seq != last+1 || !json.Valid(f.data) || !bytes.Contains(f.data, []byte(want)) || seqOf(f.data) != f.seq {
				t.Errorf("%s: after %d got frame %d %s", name, last, f.seq, f.data)
				f.release()
				return
			}
			last = f.seq
			f.release()
		}
	}
	for i, s := range readers {
		wg.Go(func() { check(fmt.Sprint("reader ", i), s, n) })
	}
	var quit atomic.Bool
	wg.Go(func() {
		check("quitter", quitter, n/2)
		h.unsubscribe(quitter) // what is still queued is never released
		quit.Store(true)
	})
	for i := int64(1); i <= n; i++ {
		// The person's text: shown even without the chat's workflow (nil).
		payload := fmt.Sprintf(`{"kind":"text","agent":"user","content":"%d"}`, i)
		ev := baton.NewEvent(baton.TypeChatText, baton.Metadata{TriggerSessionID: chatID, TriggerAgentName: "user"}, json.RawMessage(payload))
		ev.Sequence = i
		// Wait for room in the reading streams' queues (the hub never
		// waits): only the stuck stream is to be cut off.
		for !t.Failed() && (!room(readers...) || (!quit.Load() && !room(quitter))) {
			runtime.Gosched()
		}
		if t.Failed() {
			break
		}
		h.dispatch(&ev)
	}
	if t.Failed() {
		h.kickAll(kickShutdown) // a stream still waiting for frames would wait forever
	}
	wg.Wait()
	select {
	case <-stuck.kicked:
		if stuck.reason.Load() != kickSlow {
			t.Errorf("stuck stream kicked with reason %d", stuck.reason.Load())
		}
	default:
		t.Error("the stream that never read was not cut off")
	}
}

// room reports whether every subscriber's queue has room for a frame.
func room(subs ...*subscriber) bool {
	for _, s := range subs {
		if s.q.waiting() >= s.q.limit {
			return false
		}
	}
	return true
}

// nextFrame returns a subscriber's next frame, as a stream takes it (one
// at a time here); nil once it was kicked and nothing is left.
func nextFrame(s *subscriber) *frame {
	for {
		s.q.mu.Lock()
		if len(s.q.frames) > 0 {
			f := s.q.frames[0]
			s.q.frames = slices.Delete(s.q.frames, 0, 1)
			if f.seq > 0 {
				s.q.recorded--
			}
			s.q.mu.Unlock()
			return f.prepare()
		}
		s.q.mu.Unlock()
		select {
		case <-s.q.ready:
		case <-s.kicked:
			if s.q.waiting() == 0 {
				return nil
			}
		}
	}
}
