package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/llm"
	"github.com/batonhq/baton/workflow"
)

// startTurn records the native select_speaker that begins agent's turn.
func (r *run) startTurn(ctx context.Context, agent string) error {
	idx := r.st.turns
	ev := baton.NewChatEvent(baton.TypeChatSelectSpeaker, r.st.chat.ID, agent, baton.SelectSpeakerPayload{
		Kind: "select_speaker", Agent: agent, Source: "native", TurnKey: turnKey(r.st.chat.ID, agent, idx), TurnIndex: idx,
		Prompt: r.st.nextPrompt,
	})
	r.e.turns.Add(1)
	r.stage([]baton.Event{ev}, nil)
	return nil
}

// synthetic returns the synthetic select_speaker that must precede a text
// from sender when the speaker changed and no select_speaker for it was
// recorded since the last text (spec/synthetic-events.md). The resume
// signal shows as agent "system".
func (r *run) synthetic(sender, content string) []baton.Event {
	if sender == r.st.turnAgent || sender == r.st.selected || r.st.turnAgent == "" {
		return nil // no change of speaker, or the chat's first text: nobody spoke before it
	}
	display := sender
	if strings.Contains(content, ResumeSignal) {
		display = "system"
	}
	if r.e.log.Enabled(context.Background(), slog.LevelDebug) {
		r.logger().Debug("[SYNTHETIC_SPEAKER] Emitted synthetic select_speaker", "agent", display)
	}
	return []baton.Event{syntheticEvent(r.st.chat.ID, display, r.st.turns)}
}

func syntheticEvent(chatID, agent string, turns int) baton.Event {
	return baton.NewChatEvent(baton.TypeChatSelectSpeaker, chatID, agent, baton.SelectSpeakerPayload{
		Kind: "select_speaker", Agent: agent, Source: "synthetic", Synthetic: true, TurnIndex: turns,
	})
}

// ResumeSignal is the internal message that resumes a chat after a pause
// without the person's text (spec/synthetic-events.md).
const ResumeSignal = "[SYSTEM_RESUME_SIGNAL]"

// callModel streams one model call of the current turn and records its
// result: the text (or the fallback for a tool-only reply), the tool calls,
// the usage, and any derived variables the text sets.
func (r *run) callModel(ctx context.Context) error {
	st, t := r.st, r.st.turn
	agent := r.wf.Agent(t.agent)
	if agent == nil {
		return r.fail(ctx, t.agent, baton.Errorf(baton.ENOTFOUND, "agent %q: not in workflow %s", t.agent, r.wf.Name))
	}
	cfg := r.wf.LLMFor(agent.Name)
	msgID := fmt.Sprintf("%s_m%d", t.key, t.calls)
	msgs := make([]baton.Message, 0, len(st.messages)+1)
	system := st.systemMessage(agent)
	if t.prompt != "" {
		system += "\n\n" + t.prompt // an event rule's prompt, for this turn only
	}
	msgs = append(msgs, baton.Message{Role: baton.RoleSystem, Name: agent.Name, Content: system})
	msgs = append(msgs, st.messages...)
	tools, err := r.toolDefs(ctx, agent.Name)
	if err != nil {
		return r.fail(ctx, agent.Name, err)
	}
	seed := st.chat.CacheSeed
	req := &baton.Request{
		ChatID: st.chat.ID, Agent: agent.Name, MessageID: msgID, Messages: msgs, Tools: tools,
		Params: baton.ModelParams{Model: cfg.Model, Temperature: cfg.Temperature, MaxTokens: cfg.MaxTokens, Seed: &seed,
			Timeout: cfg.Timeout(), FirstTokenTimeout: cfg.FirstTokenTimeout(), IdleTimeout: cfg.IdleTimeout()},
	}
	if m := agent.Model(); m != nil && agent.StructuredOutputsRequired {
		req.ResponseFormat = &baton.ResponseFormat{Name: m.Name, Schema: m.Schema()}
	}

	var acc llm.Accumulator
	_ = r.e.cast.Broadcast(llm.ModelCallEvent(req, llm.ProviderName(r.prov)))
	gate := newTextGate(r.wf, agent) // hidden text never streams (hidden.go)
	emit := func(d baton.Delta) {    // msgID is the current attempt's
		if ev, ok := llm.StreamEvent(st.chat.ID, agent.Name, msgID, d); ok {
			_ = r.e.cast.Broadcast(ev) // observers are never waited for
		}
	}
	firstID, attempt := msgID, 1
	var streamErr, recordErr error
	callCtx, endCall := r.e.modelCall(ctx, st.chat.ID, st.recordedInputs()) // a message may interrupt it (double_texting)
	defer endCall()
	for d, err := range r.prov.Stream(callCtx, req) {
		if err != nil {
			streamErr = err
			break
		}
		if d.Kind == baton.DeltaRetry {
			if d.Retry == nil { // a provider that says no more than "again"
				d.Retry = &baton.Retry{}
			}
			// The provider sends the call again from scratch. Nothing of
			// the failed attempt is recorded (the call's result is staged
			// only when it ends), so its deltas are void: its stream.error
			// says so, and the retry streams under a new message id, so a
			// client never mixes the two replies in one bubble.
			acc.Add(d)
			_ = r.e.cast.Broadcast(llm.StreamErrorEvent(st.chat.ID, agent.Name, msgID, d.Retry.Err, true))
			if recordErr = r.record(ctx, []baton.Event{r.retryNotice(agent.Name, d.Retry)}, nil); recordErr != nil {
				break // stopping the loop ends the call
			}
			attempt++
			msgID = fmt.Sprintf("%s_a%d", firstID, attempt)
			_ = r.e.cast.Broadcast(llm.StreamStartEvent(st.chat.ID, agent.Name, msgID))
			gate = newTextGate(r.wf, agent) // what the void attempt held goes with it
			continue
		}
		acc.Add(d)
		gate.pass(d, emit)
	}
	if recordErr != nil {
		_ = r.e.cast.Broadcast(llm.StreamErrorEvent(st.chat.ID, agent.Name, msgID, recordErr, false))
		return recordErr
	}
	if streamErr == nil && errors.Is(context.Cause(callCtx), errInterrupted) {
		streamErr = errInterrupted // the stream ended as it was stopped
	}
	if streamErr != nil {
		if ctx.Err() != nil {
			return ctx.Err() // shutting down: nothing recorded, the turn resumes later
		}
		if errors.Is(context.Cause(callCtx), errInterrupted) {
			return r.interrupted(agent.Name, msgID, t.key, &acc, gate)
		}
		_ = r.e.cast.Broadcast(llm.StreamErrorEvent(st.chat.ID, agent.Name, msgID, streamErr, false))
		return r.fail(ctx, agent.Name, streamErr)
	}

	usage := acc.Usage()
	model := baton.ModelOf(r.prov, cfg.Model) // the scripted provider's own name: no made-up price
	cost := llm.Cost(model, usage, pricing(r.wf))
	text := acc.Text()
	calls := acc.ToolCalls()
	var events []baton.Event
	u := &baton.ChatUpdate{TurnAgent: &agent.Name}
	hidden := agent.AutoToolMode // its raw JSON is shown by the component, not as text
	var ctxEv *baton.Event
	if len(calls) == 0 {
		// Only a final text sets derived variables; a text that goes with
		// tool calls is the agent thinking aloud.
		var h bool
		h, u.Context, ctxEv = r.textDerived(agent.Name, text)
		hidden = hidden || h
	}
	gate.end(hidden, emit)
	events = append(events, r.synthetic(agent.Name, text)...)
	toolOnly := strings.TrimSpace(text) == "" && len(calls) > 0 // as FinalText decides on the fallback
	events = append(events, r.textEvent(agent.Name, msgID, t.key, acc.FinalText(), toolOnly, len(calls) > 0, hidden, usage, cost, gate.retraction(hidden, msgID)))
	if ctxEv != nil {
		events = append(events, *ctxEv)
	}
	usageRecorded := false
	usageEv := baton.NewChatEvent(baton.TypeChatUsageSummary, st.chat.ID, agent.Name, baton.UsageSummaryPayload{
		Kind: "usage_summary", Agent: agent.Name, Model: model, AgentMessageID: msgID,
		PromptTokens: usage.PromptTokens, CompletionTokens: usage.CompletionTokens, CachedTokens: usage.CachedTokens,
		ReasoningTokens: usage.ReasoningTokens, TotalTokens: usage.PromptTokens + usage.CompletionTokens, Cost: cost,
		RequestDigest: baton.RequestDigest(req),
	})
	if len(calls) == 0 && agent.StructuredOutputsRequired && agent.Model() != nil {
		// The usage goes before the outcome: a chat.error must be the last
		// event of the append, as the fold reads it.
		events = append(events, usageEv)
		usageRecorded = true
		more, failed, patch := r.structuredResult(agent, text)
		events = append(events, more...)
		for k, v := range patch {
			if u.Context == nil {
				u.Context = map[string]json.RawMessage{}
			}
			u.Context[k] = v
		}
		if failed {
			st := baton.ChatFailed
			u.Status = &st
		}
	}
	for i, c := range calls {
		ev, pending, err := r.toolCallEvent(ctx, agent.Name, msgID, t.key, i, c)
		if err != nil {
			return err
		}
		events = append(events, ev)
		if pending != nil {
			u.AddPending = append(u.AddPending, *pending)
		}
	}
	if len(u.AddPending) > 0 {
		waiting := baton.ChatWaitingUITool
		u.Status = &waiting
	}
	if !usageRecorded {
		events = append(events, usageEv)
	}
	// Staged: recorded before anything that must not be repeated (the next
	// model call, a tool with effects, a pause); a crash before that asks
	// the model again, as it would have before the text was recorded.
	// The call's usage row goes in the same append (see flush). A row the
	// store would refuse is logged and left out, never a run error
	// (invariant 9).
	rec := baton.UsageRecord{ChatID: st.chat.ID, Workflow: r.wf.Name, Agent: agent.Name, Model: model, Usage: usage, Cost: cost}
	if err := rec.Validate(); err != nil {
		r.e.log.Warn("engine: record usage", "chat_id", rec.ChatID, "agent", rec.Agent, "err", err)
	} else {
		u.Usage = []baton.UsageRecord{rec}
	}
	r.stage(events, u)
	return nil
}

// retryNotice is the chat.notice recorded while a model call is retried, so
// that the person sees why the reply is late (or started over) instead of
// silence.
func (r *run) retryNotice(agent string, rt *baton.Retry) baton.Event {
	var what string
	switch llm.StreamCode(rt.Err) {
	case string(baton.ProviderTimeoutFirstToken), string(baton.ProviderTimeoutIdle):
		what = "the model is slow"
	case string(baton.ProviderConnectionDropped), llm.CodeConnectionFailed:
		what = "the connection to the model dropped"
	case string(baton.ProviderMalformedChunk):
		what = "the model sent a malformed reply"
	case llm.CodeRateLimited:
		what = "the model is busy"
	default:
		what = "the model failed"
	}
	return baton.NewChatEvent(baton.TypeChatNotice, r.st.chat.ID, agent, baton.NoticePayload{
		Kind: "notice", Code: baton.NoticeModelRetry, Agent: agent, Attempt: rt.Attempt, MaxAttempts: rt.MaxAttempts,
		Message: fmt.Sprintf("%s; retrying (%d/%d)", what, rt.Attempt, rt.MaxAttempts),
	})
}

// interrupted ends a turn whose model call a person's message stopped
// (double_texting: interrupt): its stream ends with stream.completed
// {finish_reason: "interrupted"}, the text streamed so far is recorded once,
// as the agent's (tool calls it had begun are dropped), marked interrupted,
// and the turn hands over to the person, whose message the run takes next.
// Nothing is recorded for a call stopped before its first token.
//
// The partial text is hidden by the rules a whole one is (an auto-tool
// agent's, a ui_hidden trigger it matches), and also while the gate still
// holds it as a possible trigger (the generator cut at "NEX"): it never
// streamed, and would have been hidden had it ended as the trigger. Its
// chat.text retracts what streamed of a hidden one. A cut text sets no
// derived variable: the agent did not finish saying it.
//
// The call's usage is recorded when the provider reported any before the
// cut; most report it only at the end of a call, so an interrupted call's
// tokens are usually not counted.
func (r *run) interrupted(agent, msgID, key string, acc *llm.Accumulator, gate *textGate) error {
	st := r.st
	// The stream ends here, as a finished one does (its deltas stand: the
	// text is recorded under the same message id), not as a failed one.
	if ev, ok := llm.StreamEvent(st.chat.ID, agent, msgID, baton.Delta{Kind: baton.DeltaFinish, FinishReason: "interrupted"}); ok {
		_ = r.e.cast.Broadcast(ev)
	}
	var events []baton.Event
	var u baton.ChatUpdate
	if text := acc.Text(); strings.TrimSpace(text) != "" {
		hidden := r.isAutoToolAgent(agent) || gate.holding() || r.textHidden(agent, text)
		events = append(events, r.synthetic(agent, text)...)
		events = append(events, baton.NewChatEvent(baton.TypeChatText, st.chat.ID, agent, baton.TextPayload{
			Kind: "text", Agent: agent, Content: text, Index: st.texts, AgentMessageID: msgID,
			UIHidden: hidden, TurnKey: key, Interrupted: true, RetractMessageID: gate.retraction(hidden, msgID),
		}))
	}
	if usage := acc.Usage(); usage != (baton.Usage{}) {
		model := baton.ModelOf(r.prov, r.wf.LLMFor(agent).Model)
		cost := llm.Cost(model, usage, pricing(r.wf))
		events = append(events, baton.NewChatEvent(baton.TypeChatUsageSummary, st.chat.ID, agent, baton.UsageSummaryPayload{
			Kind: "usage_summary", Agent: agent, Model: model, AgentMessageID: msgID,
			PromptTokens: usage.PromptTokens, CompletionTokens: usage.CompletionTokens, CachedTokens: usage.CachedTokens,
			ReasoningTokens: usage.ReasoningTokens, TotalTokens: usage.PromptTokens + usage.CompletionTokens, Cost: cost,
		}))
		rec := baton.UsageRecord{ChatID: st.chat.ID, Workflow: r.wf.Name, Agent: agent, Model: model, Usage: usage, Cost: cost}
		if err := rec.Validate(); err != nil {
			r.e.log.Warn("engine: record usage", "chat_id", rec.ChatID, "agent", rec.Agent, "err", err)
		} else {
			u.Usage = []baton.UsageRecord{rec}
		}
	}
	events = append(events,
		baton.NewChatEvent(baton.TypeChatHandoff, st.chat.ID, agent, baton.HandoffPayload{Kind: "handoff", From: agent, HandoffType: "interrupt", TransitionTarget: workflow.RevertToUserTarget}),
		baton.NewChatEvent(baton.TypeChatInputRequest, st.chat.ID, agent, baton.InputRequestPayload{Kind: "input_request", Agent: agent, RequestID: "input_" + key + "_interrupt"}))
	waiting := baton.ChatWaitingInput
	u.TurnAgent, u.Status = &agent, &waiting
	r.stage(events, &u)
	r.logger().Info("engine: model call interrupted by the person's message", "agent", agent, "message_id", msgID)
	return nil
}

// textEvent builds the chat.text of a model call; retract names the
// streamed message a hidden text retracts (see hidden.go), if any.
func (r *run) textEvent(agent, msgID, key, content string, toolOnly, hasCalls, hidden bool, usage baton.Usage, cost float64, retract string) baton.Event {
	return baton.NewChatEvent(baton.TypeChatText, r.st.chat.ID, agent, baton.TextPayload{
		Kind: "text", Agent: agent, Content: content, Index: r.st.texts, AgentMessageID: msgID,
		Tokens: usage.PromptTokens + usage.CompletionTokens, Cost: cost, UIHidden: hidden,
		HasToolCalls: hasCalls, ToolOnly: toolOnly, TurnKey: key, RetractMessageID: retract,
	})
}
