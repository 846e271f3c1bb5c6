package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestWriteFields: a structured output reads as indented fields in the
// model's order — nested objects indented, lists of words joined, lists of
// objects as items — and what is not JSON is shown as it is.
func TestWriteFields(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"b": "two", "a": 1, "ok": true, "none": null, "tags": ["x", "y"], "empty": []}`,
			"  b: two\n  a: 1\n  ok: true\n  none: -\n  tags: x, y\n  empty: (none)\n"},
		{`{"plan": {"name": "N", "steps": [{"name": "s1", "by": ["A"]}, {"name": "s2"}]}}`,
			"  plan:\n    name: N\n    steps:\n      - name: s1\n        by: A\n      - name: s2\n"},
		{`{"multi": "line one\nline two"}`, "  multi: line one line two\n"},
		{`{}`, "  (empty)\n"},
		{`"just a string"`, "  just a string\n"},
		{`{"broken": `, "  {\"broken\": \n"},
	} {
		var b bytes.Buffer
		writeFields(&b, json.RawMessage(c.in), "  ")
		if b.String() != c.want {
			t.Errorf("%s:\n%s\nwant:\n%s", c.in, b.String(), c.want)
		}
	}
}
