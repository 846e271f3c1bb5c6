package server

import "slices"

// oaiFindPage is how many events oaiFind reads of a candidate chat at a
// time. A candidate is read only until its transcript differs from the
// request's history (most differ at their first message, within the first
// page) or holds all of it: what a request costs is bounded by the request,
// not by how long the caller's chats are.
const oaiFindPage = 64

// oaiSame says whether a transcript item t is the request's message m: the
// same role; for the person's messages the same (trimmed) text; for tool
// results the same tool_call_id; for an assistant message, every tool call
// of m is one of t's (its text is not compared: clients reformat it, and it
// is the chat's own).
func oaiSame(t, m oaiItem) bool {
	if t.role != m.role {
		return false
	}
	switch t.role {
	case "user":
		return t.content == m.content
	case "tool":
		return t.callID == m.callID
	case "assistant":
		for _, id := range m.toolCalls {
			if !slices.Contains(t.toolCalls, id) {
				return false
			}
		}
	}
	return true
}

// oaiPrefix compares a transcript with a request's history as the
// transcript grows, one item at a time, so that reading a chat can stop as
// soon as oaiMatch's answer is known: at the first item that differs
// (matchNone, whatever follows), or once every message of the request has
// its equal (matchResend, whatever follows). Items only grow: a user or tool
// item never changes once added, and the trailing assistant item only gains
// tool calls, so an item found the same stays the same; the trailing
// assistant item that lacks a tool call of the request's may still gain it,
// and is compared again.
type oaiPrefix struct {
	items   []oaiItem
	checked int // items[:checked] equal the transcript's first items
}

// decided reports whether tr (the transcript so far) settles oaiMatch: a
// caller may stop reading and call oaiMatch with tr as it stands.
func (p *oaiPrefix) decided(tr []oaiItem) bool {
	for p.checked < len(tr) && p.checked < len(p.items) {
		t, m := tr[p.checked], p.items[p.checked]
		if oaiSame(t, m) {
			p.checked++
			continue
		}
		trailing := p.checked == len(tr)-1 && t.role == "assistant"
		// A reply still being read may gain the tool call it lacks;
		// anything else that differs now differs for good.
		return !(trailing && m.role == "assistant")
	}
	return p.checked == len(p.items)
}
