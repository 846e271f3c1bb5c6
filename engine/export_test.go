package engine

import "time"

// PerChatEntries names the engine's per-chat maps that hold an entry for
// chatID, leaving out the bounded state cache: what a paused chat still
// costs beyond it (the inbox count, the creations and hand-overs Start and
// its run share included).
func (e *Engine) PerChatEntries(chatID string) []string {
	var held []string
	e.runningMu.Lock()
	if _, ok := e.running[chatID]; ok {
		held = append(held, "running")
	}
	e.runningMu.Unlock()
	e.wakeMu.Lock()
	if _, ok := e.wakes[chatID]; ok {
		held = append(held, "wakes")
	}
	e.wakeMu.Unlock()
	e.callsMu.Lock()
	if _, ok := e.calls[chatID]; ok {
		held = append(held, "calls")
	}
	e.callsMu.Unlock()
	e.cancels.mu.Lock()
	if _, ok := e.cancels.runs[chatID]; ok {
		held = append(held, "cancels.runs")
	}
	if len(e.cancels.pending[chatID]) > 0 {
		held = append(held, "cancels.pending")
	}
	e.cancels.mu.Unlock()
	if e.inbox.count(chatID) > 0 {
		held = append(held, "inbox")
	}
	e.creatingMu.Lock()
	if _, ok := e.creating[chatID]; ok {
		held = append(held, "creating")
	}
	if _, ok := e.handovers[chatID]; ok {
		held = append(held, "handovers")
	}
	e.creatingMu.Unlock()
	return held
}

// SetCreateWait sets how long Start waits for its run to take the chat,
// until restore is called.
func SetCreateWait(d time.Duration) (restore func()) {
	old := createWait
	createWait = d
	return func() { createWait = old }
}
