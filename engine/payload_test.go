package engine

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/batonhq/baton"
)

// The fold's decoders must give what json.Unmarshal gives for every member
// the fold reads, whatever the payload: the engine's own, or anything valid.

// foldFields keeps, of a decoded payload, the members the fold reads.
func foldFields(v any) any {
	switch p := v.(type) {
	case *baton.SelectSpeakerPayload:
		return baton.SelectSpeakerPayload{Agent: p.Agent, Source: p.Source, TurnKey: p.TurnKey, TurnIndex: p.TurnIndex, Prompt: p.Prompt}
	case *baton.TextPayload:
		return baton.TextPayload{Agent: p.Agent, Content: p.Content, AgentMessageID: p.AgentMessageID, HasToolCalls: p.HasToolCalls,
			ToolOnly: p.ToolOnly, Feedback: p.Feedback, InputID: p.InputID, AnswersToolCallID: p.AnswersToolCallID}
	case *baton.ToolCallPayload:
		return baton.ToolCallPayload{Agent: p.Agent, ToolName: p.ToolName, ToolCallID: p.ToolCallID, Arguments: p.Arguments,
			AgentMessageID: p.AgentMessageID, UIEventID: p.UIEventID, InteractionType: p.InteractionType, Transfer: p.Transfer,
			LifecycleKey: p.LifecycleKey, PendingKind: p.PendingKind}
	case *baton.ToolResponsePayload:
		return baton.ToolResponsePayload{ToolName: p.ToolName, ToolCallID: p.ToolCallID, Content: p.Content, InteractionType: p.InteractionType, InputID: p.InputID}
	case *baton.StructuredOutputPayload:
		return baton.StructuredOutputPayload{ModelName: p.ModelName, Data: p.Data}
	case *baton.ContextUpdatedPayload:
		return baton.ContextUpdatedPayload{Variables: p.Variables}
	case *baton.HandoffPayload:
		return baton.HandoffPayload{From: p.From, To: p.To, TransitionTarget: p.TransitionTarget, Prompt: p.Prompt}
	case *baton.InputRequestPayload:
		out := baton.InputRequestPayload{Agent: p.Agent, ToolCallID: p.ToolCallID, ToolName: p.ToolName, Round: p.Round, Resume: p.Resume}
		if p.ToolCallID != "" {
			out.RequestID = p.RequestID // folded for a tool's question only
		}
		return out
	}
	panic("foldFields: unknown payload")
}

// checkDecoders decodes data with every fold decoder and with encoding/json
// and compares what the fold reads.
func checkDecoders(t *testing.T, data []byte, n names) {
	t.Helper()
	checkDecoder(t, "select_speaker", data, n, decodeSelectSpeaker)
	checkDecoder(t, "text", data, n, decodeText)
	checkDecoder(t, "tool_call", data, n, decodeToolCall)
	checkDecoder(t, "tool_response", data, n, decodeToolResponse)
	checkDecoder(t, "structured", data, n, decodeStructured)
	checkDecoder(t, "context", data, n, decodeContext)
	checkDecoder(t, "handoff", data, n, decodeHandoff)
	checkDecoder(t, "input_request", data, n, decodeInputRequest)
}

// checkDecoder compares one fold decoder with encoding/json on data.
func checkDecoder[P any](t *testing.T, name string, data []byte, n names, decode func([]byte, *P, names)) {
	t.Helper()
	var fast, slow P
	decode(data, &fast, n)
	_ = json.Unmarshal(data, &slow)
	if got, want := foldFields(&fast), foldFields(&slow); !reflect.DeepEqual(got, want) {
		t.Errorf("%s of %q:\n got %#v\nwant %#v", name, data, got, want)
	}
}

func decoderSeeds() [][]byte {
	texts := []string{
		"", "plain", "line one\nline two\ttab", `quotes " and \ backslash`, "<b>html & co</b>", "héllo wörld ✓ 日本語",
		"emoji 🎉 pair", "\u2028 separators \u2029", "control \x01\x1f", "invalid \xff utf-8", "slash / and \u007f",
	}
	var seeds [][]byte
	for _, s := range texts {
		for _, v := range []any{
			baton.TextPayload{Kind: "text", Agent: s, Content: s, Index: 3, AgentMessageID: s, HasToolCalls: true, ToolOnly: true, Feedback: true, InputID: s, Cost: 0.5, Tokens: 12, AnswersToolCallID: s},
			baton.SelectSpeakerPayload{Kind: "select_speaker", Agent: s, Source: "native", TurnKey: s, TurnIndex: 42, Prompt: s},
			baton.ToolCallPayload{Kind: "tool_call", Agent: s, ToolName: s, ToolCallID: s, Arguments: json.RawMessage(`{"a": [1, {"b": "}"}], "c": null}`),
				AgentMessageID: s, UIEventID: s, InteractionType: s, Transfer: true, LifecycleKey: s, PendingKind: s, Payload: json.RawMessage(`[{"x":"]"}]`)},
			baton.ToolResponsePayload{Kind: "tool_response", ToolName: s, ToolCallID: s, Content: s, InteractionType: s, InputID: s, Success: true, Payload: json.RawMessage(`{"status":"ok"}`)},
			baton.StructuredOutputPayload{Kind: "structured_output_ready", ModelName: s, Data: json.RawMessage(`{"k":"v","n":[1,2,3]}`), AutoToolMode: true},
			baton.ContextUpdatedPayload{Kind: "context_updated", Agent: s, Variables: map[string]json.RawMessage{"a": json.RawMessage(`true`), s: json.RawMessage(`"x"`)}},
			baton.HandoffPayload{Kind: "handoff", From: s, To: s, TransitionTarget: s, Prompt: s, Condition: s},
			baton.InputRequestPayload{Kind: "input_request", Agent: s, RequestID: s, ToolCallID: s, ToolName: s, Round: 2, Resume: json.RawMessage(`{"task_id":"t-1","context_id":"}"}`)},
		} {
			raw, err := json.Marshal(v)
			if err != nil {
				panic(err)
			}
			seeds = append(seeds, raw)
		}
	}
	return append(seeds,
		[]byte(` { "agent" : "a" , "content" : "b\u00e9\ud83c\udf89" , "turn_index" : -7 } `),
		[]byte(`{"agent":null,"content":null,"turn_index":null,"has_tool_calls":null,"arguments":null,"variables":null}`),
		[]byte(`{"Agent":"upper","agent":"lower"}`),
		[]byte(`{"agent":"lower","AGENT":"upper"}`),
		[]byte(`{"ag\u0065nt":"escaped key"}`),
		[]byte(`{"agent":"first","agent":"second"}`),
		[]byte(`{"turn_index":1.5}`),
		[]byte(`{"turn_index":1e3}`),
		[]byte(`{"turn_index":12345678901234567890}`),
		[]byte(`{"turn_index":"7"}`),
		[]byte(`{"agent":7,"content":"kept"}`),
		[]byte(`{"transfer":"yes"}`),
		[]byte(`{"content":"lone \ud800 surrogate"}`),
		[]byte(`{"content":"bad escape \x"}`),
		[]byte(`{"variables":{"k\"ey":1,"b":[true]}}`),
		[]byte(`{"variables":{"x":1,"x":2}}`),
		[]byte("{\"variables\":{\"\xff\":\"\"}}"),
		[]byte(`{"variables":[]}`),
		[]byte(`{"skipped":{"deep":[{"a":"}]"}]},"agent":"after"}`),
		[]byte(`{"Ärger":"x","agent":"a"}`),
		[]byte(`{}`), []byte(`null`), []byte(`[]`), []byte(`"s"`), []byte(``), []byte(`{`), []byte(`{"agent":"a",}`),
		[]byte(`{"agent":"a"} x`), []byte(`{"agent" "a"}`), []byte(`{"agent":"unterminated}`),
	)
}

func TestFoldDecodersMatchEncodingJSON(t *testing.T) {
	n := names{} // shared, as in a fold: the second time a name is interned
	for _, seed := range decoderSeeds() {
		checkDecoders(t, seed, n)
		checkDecoders(t, seed, n)
		checkDecoders(t, seed, nil)
	}
}

func FuzzFoldDecoders(f *testing.F) {
	for _, seed := range decoderSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return // recorded payloads are valid JSON (baton.Event.Validate)
		}
		checkDecoders(t, data, names{})
	})
}
