// Package replay turns recorded chats into a workflow author's test bench:
// Replay re-runs an exported chat (package chatlog) against the current
// workflow folder, serving the recorded model replies while the requests
// match (Recorded) and a fallback model after, and Diff says where the two
// event sequences part; Eval runs a folder of cases with expectations.
// docs/replay.md describes the semantics; `baton replay` and `baton eval`
// are the commands built on it.
package replay
