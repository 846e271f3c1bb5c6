package openai

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/batonhq/baton"
	sdk "github.com/openai/openai-go/v3"
)

// sdkDeltas is what the provider yielded for a chunk when it decoded it
// into the SDK's own type: the reference streamChunk must agree with.
func sdkDeltas(ch *sdk.ChatCompletionChunk) []baton.Delta {
	var out []baton.Delta
	for i := range ch.Choices {
		c := &ch.Choices[i]
		if c.Index != 0 {
			continue
		}
		d := &c.Delta
		for _, key := range [...]string{"reasoning_content", "reasoning"} {
			raw := d.JSON.ExtraFields[key].Raw()
			var s string
			if len(raw) >= 2 && raw[0] == '"' && json.Unmarshal([]byte(raw), &s) == nil && s != "" {
				out = append(out, baton.Delta{Kind: baton.DeltaReasoning, Text: s})
				break
			}
		}
		if d.Content != "" {
			out = append(out, baton.Delta{Kind: baton.DeltaText, Text: d.Content})
		}
		if d.Refusal != "" {
			out = append(out, baton.Delta{Kind: baton.DeltaText, Text: d.Refusal})
		}
		for _, tc := range d.ToolCalls {
			out = append(out, baton.Delta{Kind: baton.DeltaToolCall, ToolCall: baton.ToolCallDelta{
				Index: int(tc.Index), ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments}})
		}
		if c.FinishReason != "" {
			out = append(out, baton.Delta{Kind: baton.DeltaFinish, FinishReason: c.FinishReason, ResponseID: ch.ID})
		}
	}
	if ch.JSON.Usage.Valid() {
		u := &ch.Usage
		out = append(out, baton.Delta{Kind: baton.DeltaUsage, Usage: baton.Usage{
			PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens,
			CachedTokens: u.PromptTokensDetails.CachedTokens, ReasoningTokens: u.CompletionTokensDetails.ReasoningTokens}})
	}
	return out
}

func leanDeltas(t testing.TB, data []byte) ([]baton.Delta, error) {
	var ch streamChunk
	if err := decodeChunk(data, &ch); err != nil {
		return nil, err
	}
	var out []baton.Delta
	c := &call{}
	c.emit(&ch, func(d baton.Delta, _ error) bool { out = append(out, d); return true })
	return out, nil
}

func sameDeltas(a, b []baton.Delta) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Kind != y.Kind || x.Text != y.Text || x.ToolCall != y.ToolCall || x.FinishReason != y.FinishReason ||
			x.ResponseID != y.ResponseID || x.Usage != y.Usage {
			return false
		}
	}
	return true
}

var chunkSamples = []string{
	textChunk("hello "),
	textChunk(`quotes " and \ and é and 😀`),
	chunk(`{"role":"assistant","content":""}`, ""),
	chunk(`{"content":null,"refusal":"I can't"}`, ""),
	chunk(`{"reasoning_content":"think "}`, ""),
	chunk(`{"reasoning":"more"}`, ""),
	chunk(`{"reasoning":{"effort":"high"},"content":"x"}`, ""),
	chunk(`{"reasoning_content":null,"reasoning":"r"}`, ""),
	chunk(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"echo","arguments":""}}]}`, ""),
	chunk(`{"tool_calls":[{"index":1,"function":{"arguments":"{\"a\":"}}]}`, ""),
	chunk(`{}`, "stop"),
	chunk(`{}`, "tool_calls"),
	usageChunk,
	`{"id":"x","choices":[],"usage":null}`,
	`{"id":"x","choices":[{"index":1,"delta":{"content":"other choice"}},{"index":0,"delta":{"content":"mine"},"finish_reason":null}]}`,
	`{"id":"x","choices":[{"index":0,"delta":{"content":"a"},"logprobs":{"content":[]},"finish_reason":"length"}],"system_fingerprint":"fp","service_tier":"default"}`,
}

// TestStreamChunkMatchesSDK checks the provider's chunk decoder against the
// SDK's: on every sample both yield the same deltas.
func TestStreamChunkMatchesSDK(t *testing.T) {
	for _, s := range chunkSamples {
		var ref sdk.ChatCompletionChunk
		if err := json.Unmarshal([]byte(s), &ref); err != nil {
			t.Fatalf("sdk decode %s: %v", s, err)
		}
		got, err := leanDeltas(t, []byte(s))
		if err != nil {
			t.Fatalf("decode %s: %v", s, err)
		}
		if want := sdkDeltas(&ref); !sameDeltas(got, want) {
			t.Errorf("chunk %s:\n got %+v\nwant %+v", s, got, want)
		}
	}
	// The stream decodes every chunk into one: nothing of a chunk may stay
	// in the next (a longer list of choices, a tool call, the usage).
	var reused streamChunk
	for i := range chunkSamples {
		for _, s := range append(chunkSamples[i:], chunkSamples[:i]...) {
			if err := decodeChunk([]byte(s), &reused); err != nil {
				t.Fatal(err)
			}
			var got []baton.Delta
			(&call{}).emit(&reused, func(d baton.Delta, _ error) bool { got = append(got, d); return true })
			want, _ := leanDeltas(t, []byte(s))
			if !sameDeltas(got, want) {
				t.Fatalf("chunk %s decoded into the previous one:\n got %+v\nwant %+v", s, got, want)
			}
		}
	}
}

// FuzzStreamChunk decodes arbitrary chunks both ways: where both decoders
// accept a chunk, they must yield the same deltas.
func FuzzStreamChunk(f *testing.F) {
	for _, s := range chunkSamples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := leanDeltas(t, data)
		if err != nil {
			return // a malformed chunk: the call fails and is retried
		}
		var ref sdk.ChatCompletionChunk
		if json.Unmarshal(data, &ref) != nil || ambiguousKeys(data) || badText(data) {
			return
		}
		if want := sdkDeltas(&ref); !sameDeltas(got, want) {
			t.Errorf("chunk %s:\n got %+v\nwant %+v", data, got, want)
		}
	})
}

// chunkKeys are the JSON keys streamChunk reads.
var chunkKeys = []string{"id", "choices", "usage", "index", "delta", "finish_reason", "content", "refusal",
	"reasoning_content", "reasoning", "tool_calls", "function", "name", "arguments", "prompt_tokens",
	"completion_tokens", "prompt_tokens_details", "cached_tokens", "completion_tokens_details", "reasoning_tokens"}

// ambiguousKeys reports whether data has an object with two keys equal but
// for case, or a key that differs from one streamChunk reads only by case.
// There the decoders part ways by design: encoding/json matches keys
// without regard to case and keeps the last of two, the SDK's decoder
// matches them exactly and keeps the first. A server sends each key once,
// as the API spells it.
func ambiguousKeys(data []byte) bool {
	type frame struct {
		obj, wantKey bool
		keys         []string
	}
	var st []*frame
	valueDone := func() {
		if n := len(st); n > 0 && st[n-1].obj {
			st[n-1].wantKey = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if n := len(st); n > 0 && st[n-1].obj && st[n-1].wantKey {
			f := st[n-1]
			if d, ok := tok.(json.Delim); ok && d == '}' {
				st = st[:n-1]
				valueDone()
				continue
			}
			k, _ := tok.(string)
			for _, o := range f.keys {
				if strings.EqualFold(o, k) {
					return true
				}
			}
			for _, name := range chunkKeys {
				if k != name && strings.EqualFold(k, name) {
					return true
				}
			}
			f.keys = append(f.keys, k)
			f.wantKey = false
			continue
		}
		switch d := tok.(type) {
		case json.Delim:
			switch d {
			case '{':
				st = append(st, &frame{obj: true, wantKey: true})
			case '[':
				st = append(st, &frame{})
			case ']':
				st = st[:len(st)-1]
				valueDone()
			}
		default:
			valueDone()
		}
	}
}

// loneSurrogate matches a \u escape of half a UTF-16 surrogate pair.
var loneSurrogate = regexp.MustCompile(`(?i)\\ud[89a-f]`)

// badText reports whether data holds text that is not UTF-8, raw or as a
// \u escape of a surrogate: encoding/json makes it U+FFFD, as every
// encoder of the text would later, while the SDK's decoder keeps the bytes.
func badText(data []byte) bool {
	return !utf8.Valid(data) || loneSurrogate.Match(data)
}

// A chunk nested deeper than encoding/json allows is refused — the call
// fails, as it did before chunks were decoded with segmentio's decoder,
// whose recursion has no limit and would overflow the stack (a fatal
// error, the whole process) on a megabyte of brackets.
func TestDecodeChunk_RefusesDeepNesting(t *testing.T) {
	for _, depth := range []int{10001, 1 << 20} {
		data := []byte(`{"id":"x","junk":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`)
		var ch streamChunk
		if err := decodeChunk(data, &ch); err == nil {
			t.Fatalf("a chunk nested %d deep was decoded", depth)
		}
	}
}
