//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

// canLockStore is true where flock(2) lets processes sharing a SQLite
// store tell whether they are alone (recoverAtStart).
const canLockStore = true

// lockStore takes the store's start lock (waiting for another process's
// start to end, within ctx), then tries its live lock alone. The live lock
// is then held shared until release, which the process calls at exit (the
// kernel releases both if it dies).
func lockStore(ctx context.Context, path string) (startLock, func(), error) {
	start, live, err := lockFiles(path)
	if err != nil {
		return startLock{}, nil, err
	}
	var once sync.Once
	release := func() { once.Do(func() { live.Close() }) } // closing the file drops its lock
	if err := flockWait(ctx, start, syscall.LOCK_EX); err != nil {
		start.Close()
		release()
		return startLock{}, nil, fmt.Errorf("lock the store's start (%s): %w", start.Name(), err)
	}
	done := func() { start.Close() }
	alone := syscall.Flock(int(live.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
	// Shared from now on. Turning the exclusive lock into a shared one is
	// not atomic, but every start waits for the start lock held here.
	if err := flockWait(ctx, live, syscall.LOCK_SH); err != nil {
		done()
		release()
		return startLock{}, nil, fmt.Errorf("lock the store (%s): %w", live.Name(), err)
	}
	return startLock{ok: alone, done: done}, release, nil
}

// flockWait takes how on f, trying again while another process holds a
// conflicting lock: a start lock is held for the time of one recovery.
func flockWait(ctx context.Context, f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lockFiles opens (creating) the two lock files of the store at path.
func lockFiles(path string) (start, live *os.File, err error) {
	if start, err = os.OpenFile(path+".start.lock", os.O_CREATE|os.O_RDWR, 0o600); err != nil {
		return nil, nil, fmt.Errorf("lock the store's start: %w", err)
	}
	if live, err = os.OpenFile(path+".live.lock", os.O_CREATE|os.O_RDWR, 0o600); err != nil {
		start.Close()
		return nil, nil, fmt.Errorf("lock the store: %w", err)
	}
	return start, live, nil
}
