// Package scriptedtest shows how to test a workflow: its test drives a
// workflow built in Go with the scripted model provider (deterministic,
// offline) on the memory store, and asserts on the events of the run.
//
//	go test ./examples/scriptedtest
package scriptedtest
