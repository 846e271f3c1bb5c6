package chatlog

import (
	"bytes"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/batonhq/baton"
)

func TestRead_Example(t *testing.T) {
	b, err := os.ReadFile("testdata/hello.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	f, err := Read(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if f.Header.Workflow != "hello" || f.Header.View != ViewFull || len(f.Records) != 4 {
		t.Fatalf("header %+v, %d records", f.Header, len(f.Records))
	}
	r := f.Records[2]
	if r.Line != 4 || r.Sequence != 3 || r.Type != baton.TypeChatText || !r.Flags.Visual {
		t.Fatalf("record %+v", r)
	}
	// The payload is the envelope's data without the flags and sequence.
	var p map[string]any
	if err := json.Unmarshal(r.Payload, &p); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"is_visual", "sequence"} {
		if _, ok := p[k]; ok {
			t.Errorf("payload keeps %s", k)
		}
	}
	if p["content"] != "Hello!" {
		t.Errorf("payload %v", p)
	}
	calls := f.Calls()
	if len(calls) != 1 || calls[0].Agent != "Greeter" || calls[0].Text != "Hello!" {
		t.Errorf("calls %+v", calls)
	}
}

// TestRead_Errors: each mistake is reported with its line and field.
func TestRead_Errors(t *testing.T) {
	header := `{"format":"baton.chat","version":1,"view":"full","workflow":"hello"}` + "\n"
	ev := func(typ string, seq int) string {
		return `{"type":"` + typ + `","data":{"kind":"x","sequence":` + strconv.Itoa(seq) + `},"timestamp":"t"}` + "\n"
	}
	for _, tc := range []struct{ in, want string }{
		{"", "empty file"},
		{"not json\n", "line 1: header: malformed JSON"},
		{`{"format":"other","version":1,"view":"full","workflow":"w"}` + "\n", `line 1: header: format: "other"`},
		{`{"format":"baton.chat","version":2,"view":"full","workflow":"w"}` + "\n", "line 1: header: version: 2"},
		{`{"format":"baton.chat","version":1,"view":"odd","workflow":"w"}` + "\n", `line 1: header: view: "odd"`},
		{`{"format":"baton.chat","version":1,"view":"full"}` + "\n", "line 1: header: workflow: required"},
		{`{"format":"baton.chat","version":1,"view":"full","workflow":"w","extra":1}` + "\n", `line 1: header: unknown field "extra"`},
		{header + ev("chat.text", 1) + ev("chat.text", 1), "line 3: data.sequence: 1 does not follow 1"},
		{header + ev("stream.text", 1), `line 2: type: "stream.text" is not a recorded chat.* event`},
		{header + `{"type":"chat.text","data":[],"timestamp":"t"}` + "\n", "line 2: data: must be a JSON object"},
		{header + `{"type":"chat.text","data":{"sequence":"1"},"timestamp":"t"}` + "\n", "line 2: data.sequence: must be a whole number"},
		{header + `{"type":"chat.text","data":{"sequence":1,"is_visual":"yes"},"timestamp":"t"}` + "\n", "line 2: data.is_visual: must be true or false"},
		{header + `{"type":"chat.text","data":{"sequence":1}} {}` + "\n", "line 2: unexpected data after the JSON value"},
	} {
		_, err := Read(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) || baton.ErrorCode(err) != baton.EINVALID {
			t.Errorf("Read(%q): %v, want EINVALID with %q", tc.in, err, tc.want)
		}
	}
}

// FuzzRead: Read never panics on any input, and what it accepts holds
// the format's promises: chat.* records with increasing sequences and
// object payloads without the envelope's keys.
func FuzzRead(f *testing.F) {
	if b, err := os.ReadFile("testdata/hello.jsonl"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"format":"baton.chat","version":1,"view":"client","workflow":"w"}`))
	f.Add([]byte("{\"format\":\"baton.chat\",\"version\":1,\"view\":\"full\",\"workflow\":\"w\"}\n{\"type\":\"chat.text\",\"data\":{\"sequence\":1}}\n"))
	f.Add([]byte("\n\n{}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Read(bytes.NewReader(data))
		if err != nil {
			if baton.ErrorCode(err) != baton.EINVALID {
				t.Fatalf("error without a code: %v", err)
			}
			return
		}
		last := int64(0)
		for _, r := range file.Records {
			if !baton.IsChatType(r.Type) || r.Sequence <= last {
				t.Fatalf("record %+v after sequence %d", r, last)
			}
			last = r.Sequence
			var p map[string]json.RawMessage
			if err := json.Unmarshal(r.Payload, &p); err != nil || p == nil {
				t.Fatalf("payload %q: %v", r.Payload, err)
			}
			if _, ok := p["sequence"]; ok {
				t.Fatalf("payload keeps the sequence: %s", r.Payload)
			}
		}
		// What a file says about itself never panics either.
		_, _ = file.Inputs()
		_ = file.Calls()
		_, _ = file.Scripted()
	})
}
