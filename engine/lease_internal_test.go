package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/workflow"
)

// sweepingLeases is a lease store of one running chat that runs the
// engine's takeover sweep inside AcquireLease (once the lease is taken) and
// inside ReleaseLease (before it is freed): the two moments a run holds a
// live lease that it has only just taken or is about to free. The rest of
// the engine's Store is left nil: the sweep and the lease use none of it.
type sweepingLeases struct {
	Store
	mu    sync.Mutex
	lease baton.Lease
	sweep func()
}

func (s *sweepingLeases) AcquireLease(_ context.Context, _, instanceID string, ttl time.Duration) (baton.Lease, error) {
	s.mu.Lock()
	s.lease = baton.Lease{Owner: instanceID, Token: 1, Expires: time.Now().Add(ttl)}
	s.mu.Unlock()
	s.sweep()
	return s.lease, nil
}

func (s *sweepingLeases) RenewLease(_ context.Context, _, _ string, _ int64, _ time.Duration) (baton.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lease, nil
}

func (s *sweepingLeases) ReleaseLease(context.Context, string, string, int64) error {
	s.sweep()
	s.mu.Lock()
	s.lease = baton.Lease{}
	s.mu.Unlock()
	return nil
}

func (s *sweepingLeases) GetLease(context.Context, string) (baton.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lease, nil
}

func (s *sweepingLeases) ChatsByStatus(context.Context, baton.ChatStatus, int) ([]baton.Chat, error) {
	return []baton.Chat{{ID: "c1", App: "a", User: "u", Workflow: "wf", Status: baton.ChatRunning, LastSequence: 5, CreatedAt: time.Now(), UpdatedAt: time.Now()}}, nil
}

// TestSweep_NeverTakesBackALeaseItsOwnRunIsTakingOrFreeing: while a run of
// this instance takes its chat's lease or frees it, the lease is live under
// the instance's own id; the takeover sweep must not take it for the lease
// of the instance's previous life and resume the chat (run.resume sets a
// retry).
func TestSweep_NeverTakesBackALeaseItsOwnRunIsTakingOrFreeing(t *testing.T) {
	b := bus.New()
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	ls := &sweepingLeases{}
	e := &Engine{
		bus: b, store: ls, instance: "i1", leaseTTL: time.Minute, running: map[string]int{},
		workflows: map[string]*workflow.Workflow{"wf": {Name: "wf"}}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	sweeps := 0
	ls.sweep = func() {
		sweeps++
		if err := e.sweepTakeovers(context.Background()); err != nil {
			t.Errorf("sweep: %v", err)
		}
	}
	_, lease, end, err := e.leased(context.Background(), "c1")
	if err != nil || lease == nil {
		t.Fatalf("leased: %v", err)
	}
	var runErr error
	end(&runErr)
	if sweeps != 2 {
		t.Fatalf("%d sweeps ran, want 2 (in the acquire and in the release)", sweeps)
	}
	if n := e.takeovers.Load(); n != 0 {
		t.Fatalf("the sweep took back its own run's live lease %d times", n)
	}
	if len(e.running) != 0 {
		t.Fatalf("running left marked: %v", e.running)
	}
}

// hangingLeases: the first acquire works; every renewal hangs (a database
// that stopped answering, a pool with no free connection) until its
// context ends.
type hangingLeases struct{ Store }

func (hangingLeases) AcquireLease(_ context.Context, _, id string, ttl time.Duration) (baton.Lease, error) {
	return baton.Lease{Owner: id, Token: 1, Expires: time.Now().Add(ttl)}, nil
}

func (hangingLeases) RenewLease(ctx context.Context, _, _ string, _ int64, _ time.Duration) (baton.Lease, error) {
	<-ctx.Done()
	return baton.Lease{}, ctx.Err()
}

func (hangingLeases) ReleaseLease(context.Context, string, string, int64) error { return nil }

// TestLease_RenewalThatHangsStopsTheRun: a run whose lease renewal never
// answers stops once the lease would have run out, as one whose renewal
// fails does: another instance may take the chat over then.
func TestLease_RenewalThatHangsStopsTheRun(t *testing.T) {
	e := &Engine{store: hangingLeases{}, instance: "i1", leaseTTL: 300 * time.Millisecond, running: map[string]int{},
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	h, runCtx, err := e.acquire(context.Background(), "c1")
	if err != nil {
		t.Fatal(err)
	}
	defer e.release("c1", h)
	select {
	case <-runCtx.Done():
		if !errors.Is(context.Cause(runCtx), errLeaseLost) {
			t.Fatalf("the run stopped for %v, want the lease lost", context.Cause(runCtx))
		}
	case <-time.After(10 * e.leaseTTL):
		t.Fatalf("the lease ran out %v ago, and its run goes on", 9*e.leaseTTL)
	}
}
