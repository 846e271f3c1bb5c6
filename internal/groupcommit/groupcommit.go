// Package groupcommit holds the gathering step the stores' group-commit
// writers share (store/sqlite's writer, store/postgres's batcher): wait for
// one request, then take whatever else is already waiting, without waiting
// for more. A lone request so pays one commit and no more, and under load a
// batch grows by itself to what arrived during the previous commit.
package groupcommit

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
