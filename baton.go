// Package baton is the vocabulary of the baton runtime: the events that flow
// through it, the envelopes clients receive, and the errors every part of the
// system speaks.
//
// baton is an event-driven runtime for multi-agent LLM workflows. Everything
// that happens is an [Event]: a person's message, a model's token, a tool's
// result, a background task finishing. Events are published on a bus (package
// bus), which routes each one by rules to exactly one handler and delivers the
// events of one chat in order, one at a time, while different chats proceed
// in parallel.
//
// This package imports nothing of the project. Someone who reads only this
// package knows what baton is; the other packages implement it: bus routes
// events, cmd/baton wires the parts into one binary.
package baton
