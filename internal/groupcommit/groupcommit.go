// Package groupcommit holds the gathering steps the stores' group-commit
// writers share (store/sqlite's writer, store/postgres's batcher): wait for
// one request, then take whatever else is already waiting, without waiting
// for more (Gather). A lone request so pays one commit and no more, and
// under load a batch grows by itself to what arrived during the previous
// commit. A writer may then wait a little for more (Linger) when the load
// says more are coming.
package groupcommit

import "time"

// Gather appends to batch[:0] the next request from reqs, blocking until
// one arrives, and then every request already waiting, up to max in all.
// It reports false, with an empty batch, once stop is closed while it waits
// for the first request; requests still in reqs then stay there.
func Gather[T any](reqs <-chan T, stop <-chan struct{}, batch []T, max int) ([]T, bool) {
	batch = batch[:0]
	select {
	case r := <-reqs:
		batch = append(batch, r)
	case <-stop:
		return batch, false
	}
	for len(batch) < max {
		select {
		case r := <-reqs:
			batch = append(batch, r)
		default:
			return batch, true
		}
	}
	return batch, true
}

// Linger appends to batch the requests that arrive on reqs within d, up to
// max in all, and returns early once batch holds max or stop is closed. It
// waits on t, which must be stopped or fired and drained (a timer made by
// time.NewTimer and stopped at once will do; Linger leaves it stopped).
// With d <= 0, or batch already full, it returns batch at once.
func Linger[T any](reqs <-chan T, stop <-chan struct{}, t *time.Timer, d time.Duration, batch []T, max int) []T {
	if d <= 0 || len(batch) >= max {
		return batch
	}
	t.Reset(d)
	defer t.Stop()
	for len(batch) < max {
		select {
		case r := <-reqs:
			batch = append(batch, r)
		case <-t.C:
			return batch
		case <-stop:
			return batch
		}
	}
	return batch
}
