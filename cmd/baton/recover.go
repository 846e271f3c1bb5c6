package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/batonhq/baton/runtime"
	"github.com/batonhq/baton/store/sqlite"
)

// Every command that runs chats (serve, mcp, chat) resumes at start the
// chats a stopped process left running (Runtime.Recover). Without
// --instance-id there are no leases: a process owns every chat it runs,
// and nothing in the store says which process that is. So on a SQLite
// store, which `baton serve` and `baton mcp` (or `baton chat`) may share,
// the processes also hold a lock file next to the database for as long as
// they run, shared; a process that starts resumes the running chats only
// when it can take that lock alone — no other process runs chats on the
// store, so every chat marked running was left by one that stopped.
// Next to a live process it resumes nothing (a chat it would resume may be
// that process's, running now): the chats a killed process left are
// resumed by the next process that starts alone. A second lock serialises
// the starts, so two processes starting at once do not both resume.
// With --instance-id, leases decide (engine/lease.go).
//
// Where no lock can tell (a PostgreSQL store without --instance-id, or a
// system without flock(2)), only `baton serve` resumes at start, as it
// always did: it is the store's one process by the deployment's rule
// (docs/scaling.md), while `baton mcp` or `baton chat` pointed at a
// server's store would run that server's live chats a second time.

// recoverAtStart resumes what Runtime.Recover resumes when this process is
// the store's only one, and returns what releases its lock file at exit.
// server is true for `baton serve`, which resumes wherever no lock can
// tell; mcp and chat resume only where one can.
func recoverAtStart(ctx context.Context, rt *runtime.Runtime, rc runtimeConfig, log *slog.Logger, server bool) (release func(), err error) {
	path := sqlitePath(rc)
	switch {
	case rc.instanceID != "" || strings.HasPrefix(rc.storeURL, "mem:"):
		// Leases decide (--instance-id), or the store is this process's own.
		return func() {}, rt.Recover(ctx)
	case path == "" || !canLockStore:
		// A PostgreSQL store without leases, or no flock(2): the store's
		// one process is the server.
		if !server {
			log.Info("chats left running on this store are resumed by `baton serve`, not by this command")
			return func() {}, nil
		}
		return func() {}, rt.Recover(ctx)
	}
	alone, release, err := lockStore(ctx, path)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			release()
		}
	}()
	if !alone.ok {
		log.Warn("another baton process runs chats on this store: chats left running by a stopped process are resumed by the next one that starts alone", "store", path)
		alone.done()
		return release, nil
	}
	err = rt.Recover(ctx)
	alone.done()
	if err != nil {
		return nil, err
	}
	return release, nil
}

// sqlitePath is the file of the SQLite store rc opens, or "" for another
// store.
func sqlitePath(rc runtimeConfig) string {
	switch {
	case rc.storeURL == "":
		if rc.dataDir == "" {
			return ""
		}
		return filepath.Join(rc.dataDir, "baton.db")
	case strings.HasPrefix(rc.storeURL, "sqlite:"):
		// As store.Open reads it.
		p := strings.TrimPrefix(strings.TrimPrefix(rc.storeURL, "sqlite:"), "//")
		if p == "" {
			return sqlite.DefaultPath
		}
		return p
	}
	return ""
}

// startLock is the outcome of lockStore while the start lock is held: ok
// when no other process holds the store's lock file; done ends the start
// (it releases the start lock, keeping the shared one).
type startLock struct {
	ok   bool
	done func()
}
