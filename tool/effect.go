package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/batonhq/baton"
)

// pendingGrace is added to a tool's timeout to decide that a claimed,
// unrecorded effect was abandoned rather than still running elsewhere.
const pendingGrace = 10 * time.Second

// ErrInterrupted is the error of a call whose effect was claimed by a
// process that is gone (Claimant.Gone): the call was interrupted between its
// claim and its result, and may or may not have acted. The caller tells the
// person and calls again with CallContext.Recovery set, which re-runs it at
// once under the same effect key.
var ErrInterrupted = errors.New("the call was interrupted before its result was recorded")

// Claimant is who claims effects in the ledger, and how it tells that the
// holder of an earlier, unfinished claim is gone.
type Claimant struct {
	Holder baton.EffectHolder
	// Gone reports whether the process that holds a claim has stopped (it
	// was killed or restarted, or its instance lost the chat's lease), so
	// that it can no longer be running the call. Nil: never known; the
	// claim's age decides.
	Gone func(baton.EffectHolder) bool
}

// Once runs fn at most once per key through the effect ledger and returns its
// result; replayed is true when the result is the one recorded by an earlier
// call. It is the exactly-once wrapper for tools with side effects
// (invariant 5); the registry uses it for every side_effects tool, with
// key = baton.EffectKey(chat, turn key, tool-call id).
//
// What is durable when: the claim, naming who.Holder, is durable before fn
// starts; the result is durable when Once returns it. Every ToolResult fn
// returns — ok or error — is recorded, so a replay sees what the model saw. A
// Go error from fn (the context was cancelled, the outcome is unknown) is not
// recorded.
//
// If the process dies between the claim and the record, the ledger holds the
// key as EffectPending and nobody knows whether the effect happened. Once
// then decides by the claim's holder, then by its age:
//
//   - the holder is gone (who.Gone): Once returns ErrInterrupted unless
//     recovery is set; with it, Once takes the claim over and runs fn again
//     at once with the same key;
//   - claimed less than inFlight ago (the tool's timeout plus a grace): the
//     call may still be running in another process, so Once returns an
//     ECONFLICT error and the caller retries later;
//   - older: the call was abandoned, so Once takes the claim over and runs fn
//     again with the same key, recording that result.
//
// A re-run is why a tool that must not act twice uses the key to
// de-duplicate (commands get it as BATON_EFFECT_KEY, HTTP endpoints as the
// Idempotency-Key header, Go tools as CallContext.EffectKey): only the crash
// window is at-least-once; everything else is exactly-once. Of several
// processes taking one claim over, one runs fn; the others get ECONFLICT.
func Once(ctx context.Context, ledger baton.EffectLedger, scope baton.Scope, chatID, key string, inFlight time.Duration, who Claimant, recovery bool,
	fn func(context.Context) (baton.ToolResult, error)) (res baton.ToolResult, replayed bool, err error) {
	eff, err := ledger.ClaimEffect(ctx, scope, chatID, key, who.Holder)
	if err != nil {
		return baton.ToolResult{}, false, fmt.Errorf("claim effect %s: %w", key, err)
	}
	switch eff.State {
	case baton.EffectDone:
		if err := json.Unmarshal(eff.Result, &res); err != nil {
			return baton.ToolResult{}, false, fmt.Errorf("effect %s: recorded result: %w", key, err)
		}
		return res, true, nil
	case baton.EffectPending:
		gone := who.Gone != nil && who.Gone(eff.Holder)
		if gone && !recovery {
			return baton.ToolResult{}, false, fmt.Errorf("effect %s (claimed by instance %q, boot %s, which is gone): %w", key, eff.Holder.Instance, eff.Holder.Boot, ErrInterrupted)
		}
		if age := time.Since(eff.ClaimedAt); !gone && age < inFlight {
			return baton.ToolResult{}, false, baton.Errorf(baton.ECONFLICT,
				"effect %s was claimed %s ago and may still be running; retry after %s", key, age.Round(time.Millisecond), (inFlight - age).Round(time.Second))
		}
		taken, err := ledger.TakeOverEffect(ctx, scope, chatID, eff, who.Holder)
		if err != nil {
			return baton.ToolResult{}, false, fmt.Errorf("take over effect %s: %w", key, err)
		}
		if !taken {
			return baton.ToolResult{}, false, baton.Errorf(baton.ECONFLICT, "effect %s was taken over by another process; retry later", key)
		}
	case baton.EffectNew:
	default:
		return baton.ToolResult{}, false, fmt.Errorf("effect %s: unknown state %d", key, eff.State)
	}
	res, err = fn(ctx)
	if err != nil {
		return baton.ToolResult{}, false, err
	}
	if res.Status == baton.ToolStatusPending {
		// A UI tool's request is not its result: the person's response is,
		// and the human-in-the-loop path records that.
		return res, false, nil
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return baton.ToolResult{}, false, fmt.Errorf("effect %s: encode result: %w", key, err)
	}
	// Record even if ctx was cancelled meanwhile: the effect happened.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := ledger.RecordEffect(rctx, scope, chatID, key, raw); err != nil {
		if baton.ErrorCode(err) == baton.ECONFLICT {
			// Another process re-ran an abandoned effect and recorded first:
			// its result is the one every replay sees, so return it.
			if eff, cerr := ledger.ClaimEffect(rctx, scope, chatID, key, who.Holder); cerr == nil && eff.State == baton.EffectDone {
				var recorded baton.ToolResult
				if json.Unmarshal(eff.Result, &recorded) == nil {
					return recorded, true, nil
				}
			}
		}
		return baton.ToolResult{}, false, fmt.Errorf("record effect %s: %w", key, err)
	}
	return res, false, nil
}

// flightGroup makes concurrent calls with one effect key in this process
// share one execution, so that they do not race each other into the ledger's
// pending state.
type flightGroup struct {
	mu sync.Mutex
	m  map[string]*flight
}

type flight struct {
	done     chan struct{}
	res      baton.ToolResult
	replayed bool
	err      error
}

func (g *flightGroup) do(ctx context.Context, key string, fn func() (baton.ToolResult, bool, error)) (baton.ToolResult, bool, error) {
	g.mu.Lock()
	if f, ok := g.m[key]; ok {
		g.mu.Unlock()
		select {
		case <-f.done:
			return f.res, true, f.err
		case <-ctx.Done():
			return baton.ToolResult{}, false, fmt.Errorf("effect %s: waiting for the call in flight: %w", key, ctx.Err())
		}
	}
	if g.m == nil {
		g.m = map[string]*flight{}
	}
	f := &flight{done: make(chan struct{})}
	g.m[key] = f
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		delete(g.m, key)
		g.mu.Unlock()
		close(f.done)
	}()
	f.res, f.replayed, f.err = fn()
	return f.res, f.replayed, f.err
}
