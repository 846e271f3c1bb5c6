package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/batonhq/baton"
)

// FuzzChatRequest: the Chat Completions request decoder never panics;
// every error is EINVALID with a message that starts with the field at
// fault (OpenAI's param); an accepted request names a model and ends with
// a user or tool message, with non-empty user messages and tool messages
// that name their call.
func FuzzChatRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"hello","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"hello","messages":[{"role":"system","content":"be nice"},{"role":"user","content":[{"type":"text","text":"hi"}]}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"g","messages":[{"role":"user","content":"a"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"{\"ok\":true}"}]}`,
		`{"model":"hello","messages":[{"role":"user","content":"hi"}],"baton":{"chat_id":"x","agent_prefix":true},"temperature":0.2,"n":1}`,
		`{"model":"hello","messages":[{"role":"assistant","content":"x"}]}`,
		`{"model":"","messages":[]}`, `{"model":1}`, `{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`,
		`[]`, `null`, `{"model":`, `{} {}`, "\xff", ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, items, err := decodeChatRequest(data)
		if err != nil {
			msg := baton.ErrorMessage(err)
			field, _, ok := strings.Cut(msg, ": ")
			if baton.ErrorCode(err) != baton.EINVALID || !ok || field == "" {
				t.Fatalf("error %v: code %q, want EINVALID naming the field", err, baton.ErrorCode(err))
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		if strings.TrimSpace(req.Model) == "" || len(items) == 0 {
			t.Fatalf("accepted %q: model %q, %d items", data, req.Model, len(items))
		}
		if last := items[len(items)-1].role; last != "user" && last != "tool" {
			t.Fatalf("accepted %q ending with %s", data, last)
		}
		for _, it := range items {
			switch it.role {
			case "user":
				if it.content == "" || it.content != strings.TrimSpace(it.content) {
					t.Fatalf("accepted %q with user content %q", data, it.content)
				}
			case "tool":
				if it.callID == "" {
					t.Fatalf("accepted %q with a tool message without tool_call_id", data)
				}
			case "assistant":
			default:
				t.Fatalf("accepted %q with role %q", data, it.role)
			}
		}
	})
}
