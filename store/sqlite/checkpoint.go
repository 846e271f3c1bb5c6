package sqlite

import (
	"context"
	"os"
	"time"
)

// Checkpoints copy the WAL's pages into the database file. SQLite's own
// (wal_autocheckpoint) runs inside the commit that crosses the threshold,
// which stalled that commit, and every append waiting behind it, for 10 ms
// and more: most of the appends' p99. The writer therefore has automatic
// checkpoints turned off and a goroutine with a connection of its own runs
// them in the background (PASSIVE: they never block the writer, nor wait for
// it).
//
// A background checkpoint copies what was committed when it started; the
// writer keeps appending meanwhile, so under steady load the WAL is never
// fully copied and never starts over, and would grow without bound. When the
// WAL passes walRestartFrames, the checkpointer therefore runs checkpoints
// back to back until one finds little new to copy, and then asks the writer
// to copy the remainder itself between two batches: a stall of one small
// checkpoint (a few hundred pages and an fsync of the database file) once
// per walRestartFrames, after which the writer's next transaction writes the
// WAL from the start again.
//
// Each background checkpoint fsyncs the WAL, and the database file when it
// reaches the WAL's end, and those fsyncs slow the writer's own: the
// checkpointer therefore waits, between two checkpoints, for about
// ckptPages new pages (from ckptInterval to ckptMaxInterval), which also
// lets it copy once a page that many commits rewrote (a chat's row, the last
// page of an index).
//
// They are variables so that a test can make them small.
var (
	walRestartFrames = 8192                   // pages, 32 MiB at 4 KiB (a longer WAL made appends slower)
	walCaughtUp      = 1024                   // new pages since the previous checkpoint that the writer may copy
	ckptPages        = 4096                   // new pages a background checkpoint aims to copy
	ckptInterval     = 50 * time.Millisecond  // the least time between two background checkpoints
	ckptMaxInterval  = 500 * time.Millisecond // the most, while the writer commits
)

// kickCheckpointer tells the checkpointer that something was committed.
func (s *Store) kickCheckpointer() {
	select {
	case s.ckptKick <- struct{}{}:
	default:
	}
}

// checkpointer runs PASSIVE checkpoints while the writer commits, paced as
// described above.
func (s *Store) checkpointer() {
	defer close(s.ckptDone)
	ctx := context.Background()
	wait := ckptInterval
	t := time.NewTimer(wait)
	last := 0 // the WAL's length at the previous checkpoint
	for {
		select {
		case <-s.ckptKick:
		case <-s.closing:
			return
		}
		t.Reset(wait)
		select {
		case <-t.C:
		case <-s.closing:
			return
		}
		frames, err := s.checkpoint(ctx)
		if err == nil && frames >= 0 { // -1: the writer was checkpointing
			grown := frames - last
			if frames < last {
				grown = frames // the WAL started over
			}
			// Halve or double at most: one quiet or busy interval says little.
			f := min(max(float64(ckptPages)/float64(max(grown, 1)), 0.5), 2)
			wait = min(max(time.Duration(float64(wait)*f), ckptInterval), ckptMaxInterval)
		}
		// Catch up with the writer before asking it to finish: a few passes
		// at most, each copying what the writer committed during the last.
		ask := false
		for i := 0; err == nil && frames >= walRestartFrames && i < 8; i++ {
			var next int
			if next, err = s.checkpoint(ctx); err == nil && next-frames <= walCaughtUp {
				ask = true
				break
			}
			frames = next
		}
		// Never caught up: bound the WAL at the price of a longer stall.
		ask = ask || err == nil && frames >= 4*walRestartFrames
		if ask {
			s.syncDB()
			s.ckptAsk.Store(true)
		}
		if err != nil {
			s.log.Warn("sqlite: checkpoint failed", "err", err)
		}
		last = max(frames, 0)
	}
}

// syncDB fsyncs the database file. A checkpoint syncs it only when it copies
// the WAL to its end, which under load the background ones seldom do (the
// writer has committed more meanwhile), so the pages they copied pile up
// unsynced, and the writer's final checkpoint, which does reach the end,
// would wait for all of them; syncing them here keeps that stall short.
// SQLite syncs the file again itself before the WAL starts over, so this is
// only about when the work happens, never about durability.
func (s *Store) syncDB() {
	f, err := os.Open(s.path)
	if err != nil {
		s.log.Warn("sqlite: sync database file", "err", err)
		return
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		s.log.Warn("sqlite: sync database file", "err", err)
	}
}

// checkpoint runs a PASSIVE checkpoint on the checkpointer's connection and
// returns the WAL's length in pages.
func (s *Store) checkpoint(ctx context.Context) (frames int, err error) {
	var busy, copied int
	err = s.cdb.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &copied)
	return frames, err
}

// checkpointIfAsked runs, on the writer's connection between two batches,
// the checkpoint the checkpointer asked for.
func (s *Store) checkpointIfAsked() {
	if !s.ckptAsk.Swap(false) {
		return
	}
	var busy, frames, copied int
	s.lockConn()
	defer s.wmu.Unlock()
	if err := s.w.conn.QueryRowContext(context.Background(), `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &copied); err != nil {
		s.log.Warn("sqlite: checkpoint failed", "err", err)
	}
}
