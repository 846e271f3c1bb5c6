package natsbridge

import (
	"context"
	"time"
)

// WaitSubscriptions waits until the bridge's connection holds at most n
// subscriptions, then flushes, so that NATS has processed every
// unsubscription before the test publishes: a released watch is dropped by
// the unsubscriber goroutine, after release returns.
func (br *Bridge) WaitSubscriptions(ctx context.Context, n int) error {
	for br.nc.NumSubscriptions() > n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond): // polling the unsubscriber, bounded by ctx
		}
	}
	return br.nc.FlushWithContext(ctx)
}

// Subscriptions returns how many subscriptions the bridge's connection holds.
func (br *Bridge) Subscriptions() int { return br.nc.NumSubscriptions() }
