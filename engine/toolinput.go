package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/workflow"
)

// A tool call that asks the person (docs/engine.md, "A tool that asks the
// person"): a tool whose result is baton.ToolStatusInputRequired — an a2a
// tool whose remote task stopped at input-required — does not answer the
// model yet. Its call stays open and three steps follow, each recorded
// before the next starts, so a restart at any point goes on from the last:
//
//  1. askPerson records a chat.input_request naming the call (tool_call_id,
//     tool_name, round, and the tool's resume state), a pending request of
//     kind baton.PendingToolInput and the status waiting_input. Every client
//     shows it as any pause for the person.
//  2. The person's next message (a user.query, through any client) is taken
//     by toolAnswer: their chat.text, visible as any message, marked
//     answers_tool_call_id, resolving the pending request. Only a message
//     the inbox accepted after the store recorded the question answers it
//     (baton.AnswersToolInput, the rule the AG-UI server applies too): one
//     typed before — while the tool ran, say — was not written for the
//     question, which the person had not seen; it stays in the inbox, for
//     the model once the call has ended.
//  3. runTool calls the tool again with baton.CallContext.Answer, under the
//     effect key baton.AnswerEffectKey(call key, round): each answer is one
//     effect in the ledger, so a crash during it re-sends the same message
//     (its id derived from that key) and the remote side takes it once. The
//     tool may ask again (round+1) or answer: its chat.tool_response is then
//     recorded as for any call, and the model goes on.
//
// A call asks at most MaxToolInputRounds times. In a fork, a call that
// asked before the fork point ends with an error (endInheritedAsk): its
// resume state names the original chat's remote work. A question the
// fork's own run asked is the fork's, waited for as in any chat.
//
// The fold keeps all of it on the open call (openCall.ask): nothing lives
// only in memory.

// MaxToolInputRounds bounds the questions one tool call may ask the
// person: a remote agent that keeps asking would otherwise hold the chat
// (and the person) forever. Past it the call ends with an error result for
// the model.
const MaxToolInputRounds = 10

// toolAsk is what the fold knows of an open call whose tool asked the
// person. It is allocated only for such a call, so that the open calls of
// every other turn stay small.
type toolAsk struct {
	asking   string          // the pending request's id while the call waits for the answer
	seq      int64           // the question's sequence in the chat: in a fork, one at or before the fork point is the original's
	round    int             // the questions asked so far
	resume   json.RawMessage // the tool's state from the last one
	answer   string          // the person's answer to it, once recorded (answered)
	answered bool
}

// toolCall returns the current turn's open call with the model's id, or nil.
func (st *state) toolCall(id string) *openCall {
	if st.turn == nil {
		return nil
	}
	for i := range st.turn.open {
		if st.turn.open[i].id == id {
			return &st.turn.open[i]
		}
	}
	return nil
}

// toolAsking returns the open call waiting for the person's answer, or nil.
func (st *state) toolAsking() *openCall {
	if st.turn == nil {
		return nil
	}
	for i := range st.turn.open {
		if a := st.turn.open[i].ask; a != nil && a.asking != "" {
			return &st.turn.open[i]
		}
	}
	return nil
}

// toolAsked folds a chat.input_request of an open call: the call waits for
// the answer. It reports false when no such call is open (the request is
// then folded as a plain one).
func (st *state) toolAsked(p *baton.InputRequestPayload, seq int64) bool {
	oc := st.toolCall(p.ToolCallID)
	if oc == nil {
		return false
	}
	oc.ask = &toolAsk{asking: p.RequestID, seq: seq, round: p.Round, resume: p.Resume}
	return true
}

// askedRequest returns the pending request of oc's question as the store
// recorded it (its CreatedAt is the store's time of the question, which
// baton.AnswersToolInput compares with an input's AcceptedAt), reading the
// chat: the fold keeps events, not the store's times. A request not
// pending (not yet recorded, which runTool's order rules out) has a zero
// CreatedAt: any message answers, as an AG-UI reconnect sees it.
func (r *run) askedRequest(ctx context.Context, oc *openCall) (baton.PendingRequest, error) {
	chat, err := r.e.store.GetChat(ctx, r.scope, r.st.chat.ID)
	if err != nil {
		return baton.PendingRequest{}, fmt.Errorf("read the tool's question: %w", err)
	}
	for _, p := range chat.Pending {
		if p.UIEventID == oc.ask.asking {
			return p, nil
		}
	}
	return baton.PendingRequest{UIEventID: oc.ask.asking, Kind: baton.PendingToolInput}, nil
}

// toolAnswered folds the person's answer to an open call's question. It
// reports false when no call of that id is waiting (the text is then
// folded as a plain message).
func (st *state) toolAnswered(id, text string) bool {
	oc := st.toolCall(id)
	if oc == nil || oc.ask == nil || oc.ask.asking == "" {
		return false
	}
	oc.ask = &toolAsk{seq: oc.ask.seq, round: oc.ask.round, resume: oc.ask.resume, answer: text, answered: true}
	return true
}

// withAnswer sets, for a call that has the person's answer, what the tool
// needs to go on: the answer, its round and the tool's state, and the
// answer's own effect key.
func withAnswer(cc *baton.CallContext, oc openCall) {
	a := oc.ask
	if a == nil || !a.answered {
		return
	}
	cc.Answer = &baton.ToolAnswer{Text: a.answer, Resume: a.resume, Round: a.round}
	cc.EffectKey = baton.AnswerEffectKey(cc.EffectKey, a.round)
}

// toolInputID is the request id of a call's round-th question. Pending
// ids are unique across chats (a fork's copy of the chat goes on under the
// same turn keys), so it names the chat; the call is hashed, to keep it
// short whatever the model's call id.
func (r *run) toolInputID(oc openCall, round int) string {
	chat := r.st.chat.ID
	if len(chat) > 64 {
		chat = shortHash(chat) // a caller-chosen chat id: the request id must stay within baton.MaxEventIDLen
	}
	return "toolinput_" + chat + "_" + strconv.Itoa(r.st.turn.index) + "_" + shortHash(r.st.turn.key, oc.id) + "_" + strconv.Itoa(round)
}

// askPerson stages the chat.input_request of a call whose tool asked the
// person (res.Status is baton.ToolStatusInputRequired): its prompt is the
// tool's question, and the chat waits for the person's message.
func (r *run) askPerson(oc openCall, res baton.ToolResult) {
	round := 1
	if oc.ask != nil {
		round = oc.ask.round + 1
	}
	id := r.toolInputID(oc, round)
	prompt := res.Content
	if prompt == "" {
		prompt = fmt.Sprintf("%s needs your answer to go on.", oc.name)
	}
	var resume json.RawMessage
	if len(res.Resume) > 0 && json.Valid(res.Resume) {
		resume = res.Resume
	}
	r.logger().Info("engine: a tool call waits for the person's answer", "tool", oc.name, "tool_call_id", oc.id, "round", round)
	ev := baton.NewChatEvent(baton.TypeChatInputRequest, r.st.chat.ID, oc.agent, baton.InputRequestPayload{
		Kind: "input_request", Agent: oc.agent, Prompt: prompt, RequestID: id,
		ToolCallID: oc.id, ToolName: oc.name, Round: round, Resume: resume,
	})
	waiting := baton.ChatWaitingInput
	r.stage([]baton.Event{ev}, &baton.ChatUpdate{Status: &waiting, AddPending: []baton.PendingRequest{{
		UIEventID: id, Kind: baton.PendingToolInput, ToolCallID: oc.id, ToolName: oc.name, Agent: oc.agent,
	}}})
}

// toolAnswer stages the person's message that answers the question of oc:
// their chat.text (shown as any message of theirs, taken from the inbox and
// resolving the pending request in the same append). The call goes on at
// the next step (runTool, with the answer). A new set of client tools
// sent with the answer (an AG-UI run's tools) is kept as with any message.
func (r *run) toolAnswer(ev baton.Event, oc *openCall, content string, q baton.UserQueryPayload) error {
	st := r.st
	id, asking := oc.id, oc.ask.asking // staging the text folds the answer into oc
	user := workflow.UserAgent
	events := r.synthetic(user, content)
	events = append(events, baton.NewChatEvent(baton.TypeChatText, st.chat.ID, user, baton.TextPayload{
		Kind: "text", Agent: user, Content: content, Index: st.texts, Source: q.Source, InputID: ev.ID,
		AnswersToolCallID: id,
	}))
	running := baton.ChatRunning
	u := &baton.ChatUpdate{Status: &running, TurnAgent: &user, ConsumeInputs: []string{ev.ID}, ResolvePending: []string{asking}}
	r.offerClientTools(q.ClientTools, u)
	r.stage(events, u)
	return nil
}

// inheritedAsk reports whether oc's tool asked its question in the chat
// this one was forked from (at or before the fork point): its resume state
// names that chat's remote task, which the fork must not answer. A
// question with no sequence (0) is this chat's own: its state was staged
// here and kept in the cached state after the flush recorded it; a state
// folded from the store has the recorded sequence, past the fork point.
func (r *run) inheritedAsk(oc openCall) bool {
	if oc.ask == nil {
		return false
	}
	f := baton.ForkedFromOf(r.st.chat)
	return f != nil && oc.ask.seq > 0 && oc.ask.seq <= f.Sequence
}

// endInheritedAsk stages, in a fork, the end of a call whose tool asked in
// the original chat: an error response telling the fork's model to call
// the tool again, which starts a remote task of the fork's own. Fork
// leaves the question's request out of the fork's pending requests; one
// that is pending all the same is resolved in the same append, so that
// no client is left showing a question nobody will take.
func (r *run) endInheritedAsk(ctx context.Context, oc openCall) error {
	running := baton.ChatRunning
	u := &baton.ChatUpdate{Status: &running}
	if oc.ask.asking != "" {
		chat, err := r.e.store.GetChat(ctx, r.scope, r.st.chat.ID)
		if err != nil {
			return fmt.Errorf("read the fork's pending requests: %w", err)
		}
		for _, p := range chat.Pending {
			if p.UIEventID == oc.ask.asking {
				u.ResolvePending = []string{p.UIEventID}
			}
		}
	}
	r.logger().Info("engine: a forked chat ends the tool call that asked in the original", "tool", oc.name, "tool_call_id", oc.id)
	r.stage([]baton.Event{baton.NewChatEvent(baton.TypeChatToolResponse, r.st.chat.ID, oc.agent, baton.ToolResponsePayload{
		Kind: "tool_response", Agent: oc.agent, ToolName: oc.name, ToolCallID: oc.id, CallID: oc.id, Corr: r.st.turn.key,
		Status: baton.ToolStatusError, Success: false,
		Content: fmt.Sprintf("Tool %s: the remote task belongs to the chat this one was forked from; call the tool again to start a new one.", oc.name),
	})}, u)
	return nil
}

// tooManyRounds is the result of a call whose tool asks once more than
// MaxToolInputRounds allows: an error for the model, the call ended.
func tooManyRounds(oc openCall) (baton.ToolResult, bool) {
	if oc.ask == nil || oc.ask.round < MaxToolInputRounds {
		return baton.ToolResult{}, false
	}
	return baton.ToolResult{Status: baton.ToolStatusError, Content: fmt.Sprintf(
		"Tool %s asked the person %d times without finishing; the call was ended. Do not call it again for the same request unless the person asks you to.",
		oc.name, oc.ask.round)}, true
}
