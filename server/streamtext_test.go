package server

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/llm"
)

// streamTextTexts are deltas as models write them: plain words, and the
// characters the encoders escape or keep raw.
var streamTextTexts = []string{
	"Once", " upon a time", "line\nbreak\ttab\r", `a "quote" and a \ backslash`,
	"<b>&amp;</b>", "héllo wörld", "emoji 😀 and 中文", "\u2028\u2029", "\x01\x1f",
	"bad utf-8 \xff\xfe", "/slash/",
}

// hubStreamText is the envelope the hub builds for a stream.text delta.
func hubStreamText(t testing.TB, chatID, agent, msgID, text string) []byte {
	t.Helper()
	ev, ok := llm.StreamEvent(chatID, agent, msgID, baton.Delta{Kind: baton.DeltaText, Text: text})
	if !ok {
		t.Fatalf("no stream event for %q", text)
	}
	b, ok := ev.AppendEnvelope(nil, baton.AgentFlags{})
	if !ok {
		t.Fatalf("no envelope for %q", text)
	}
	return b
}

// The fast path takes every envelope the hub builds for a delta, and reads
// what encoding/json reads.
func TestDecodeStreamText_HubEnvelopes(t *testing.T) {
	for _, text := range streamTextTexts {
		env := hubStreamText(t, "chat-1", "writer", "msg-1", text)
		got, ok := decodeStreamText(env)
		if !ok {
			t.Errorf("%q: the fast path refused the hub's envelope %s", text, env)
			continue
		}
		var want struct {
			Data aguiStreamData `json:"data"`
		}
		if err := json.Unmarshal(env, &want); err != nil {
			t.Fatal(err)
		}
		if got != streamDelta(want.Data) {
			t.Errorf("%s:\n got %+v\nwant %+v", env, got, want.Data)
		}
		if got.MessageID != "msg-1" || got.Agent != "writer" {
			t.Errorf("%s: got %+v", env, got)
		}
	}
}

// Shapes the fast path leaves to encoding/json: what an adapter's struct
// may read differently (another member, a key in another case, a second
// data), what it does not parse (numbers, nesting, surrogates), and
// invalid JSON.
func TestDecodeStreamText_RefusesOtherShapes(t *testing.T) {
	for _, env := range []string{
		`{"type":"stream.text","data":{"delta":"x","content":"y"}}`,
		`{"type":"stream.text","data":{"Delta":"x"}}`,
		`{"type":"stream.text","Data":{"delta":"x"}}`,
		`{"type":"stream.text","data":{"delta":"x"},"data":{"agent":"a"}}`,
		`{"type":"stream.text","data":{"delta":"x","index":1}}`,
		`{"type":"stream.text","data":{"delta":"x"},"n":1}`,
		`{"type":"stream.text","data":{"delta":"x"},"o":{}}`,
		`{"type":"stream.text","data":{"delta":"\ud83d\ude00"}}`,
		`{"type":"stream.text","data":{"delta":null}}`,
		`{"type":"stream.text","data":{"d\u0065lta":"x"}}`,
		`{"type":"stream.text","data":{"delta":"x"}} x`,
		`{"type":"stream.text","data":{"delta":"x"}`,
		`{"type":"stream.text","data":{"delta":"x",}}`,
		`{"type":"stream.text","data":{"delta":"a` + "\n" + `b"}}`,
		`{"type":"stream.text","data":{"delta":"\x"}}`,
		`{"type":"stream.text","data":{"delta":"\u12"}}`,
		`{"type":"stream.text","data":{"delta":"` + "\xff" + `"}}`,
		`{"type":"stream.text"}`,
		`{"type":"stream.text","data":nul}`,
		`[]`,
		``,
	} {
		if d, ok := decodeStreamText([]byte(env)); ok {
			t.Errorf("%s: accepted as %+v", env, d)
		}
	}
}

// FuzzDecodeStreamText: wherever the fast path answers, encoding/json
// accepts the envelope and reads the same, into the AG-UI mapper's struct
// and into the Chat Completions reply's (whose other fields stay empty).
func FuzzDecodeStreamText(f *testing.F) {
	for _, text := range streamTextTexts {
		f.Add(hubStreamText(f, "chat-1", "writer", "msg-1", text))
	}
	f.Add([]byte(`{"type":"stream.text","data":{},"timestamp":"x","more":true,"x":null}`))
	f.Add([]byte(` { "data" : { "agent" : "a" , "agent" : "b" } } `))
	f.Add([]byte(`{"data":{"delta":"\u00e9\/\b\f\u2028"}}`))
	f.Fuzz(agreesWithEncodingJSON)
}

// TestDecodeStreamText_MutatedEnvelopesAgree runs FuzzDecodeStreamText's
// check on the hub's envelopes with random bytes changed, inserted or cut
// (a fixed seed: the same cases every run); the fast path must answer
// some of them.
func TestDecodeStreamText_MutatedEnvelopesAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte(`{}[]",:\ u0aZ09-.etrufnl` + "\x00\x1f\x7f\xc3\xa9\xff")
	answered := 0
	for i := range 20000 {
		env := hubStreamText(t, "chat-1", "writer", "msg-1", streamTextTexts[i%len(streamTextTexts)])
		for range 1 + rng.IntN(3) {
			at := rng.IntN(len(env))
			c := alphabet[rng.IntN(len(alphabet))]
			switch rng.IntN(3) {
			case 0:
				env[at] = c
			case 1:
				env = slices.Insert(env, at, c)
			default:
				env = slices.Delete(env, at, at+1)
			}
		}
		if _, ok := decodeStreamText(env); ok {
			answered++
		}
		agreesWithEncodingJSON(t, env)
		if t.Failed() {
			return
		}
	}
	if answered == 0 {
		t.Fatal("the fast path answered no mutated envelope: the check checked nothing")
	}
	t.Logf("%d of 20000 mutated envelopes answered by the fast path", answered)
}

// agreesWithEncodingJSON fails t if decodeStreamText answers env with
// anything but what encoding/json reads.
func agreesWithEncodingJSON(t *testing.T, env []byte) {
	t.Helper()
	got, ok := decodeStreamText(env)
	if !ok {
		return
	}
	var agui struct {
		Data aguiStreamData `json:"data"`
	}
	if err := json.Unmarshal(env, &agui); err != nil {
		t.Fatalf("%q: fast path accepted, encoding/json: %v", env, err)
	}
	if got != streamDelta(agui.Data) {
		t.Fatalf("%q:\n got %+v\nwant %+v", env, got, agui.Data)
	}
	var fast, slow oaiEvent
	if err := fast.decodeEnvelope(baton.TypeStreamText, env); err != nil {
		t.Fatal(err)
	}
	v := struct {
		Data *oaiEvent `json:"data"`
	}{&slow}
	if err := json.Unmarshal(env, &v); err != nil {
		t.Fatal(err)
	}
	slow.Type = baton.TypeStreamText
	fj, _ := json.Marshal(fast)
	sj, _ := json.Marshal(slow)
	if string(fj) != string(sj) || fast.Type != slow.Type {
		t.Fatalf("%q: oaiEvent\n got %s\nwant %s", env, fj, sj)
	}
}

// BenchmarkDecodeStreamText compares a delta's decoding by the fast path
// and by encoding/json, as the adapters did before.
func BenchmarkDecodeStreamText(b *testing.B) {
	env := hubStreamText(b, "01JB2Y3Z4A5B6C7D8E9F0G1H2J", "writer", "msg-01JB2Y3Z4A5B6C7D8E9F", " the quick brown fox")
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := decodeStreamText(env); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var d struct {
				Data aguiStreamData `json:"data"`
			}
			if err := json.Unmarshal(env, &d); err != nil {
				b.Fatal(err)
			}
		}
	})
}
