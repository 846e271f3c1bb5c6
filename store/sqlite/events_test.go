package sqlite

import (
	"strings"
	"testing"

	"github.com/batonhq/baton"
)

func TestUnpackEvent(t *testing.T) {
	// Two events back to back, as Events reads a block: the second has
	// extra metadata and no payload.
	p := "7 1700000000000 2 9 0 2 2 0 7 0 idchat.textAbé{\"k\":1}" +
		"8 1700000000001 1 1 0 0 0 0 0 10 ab{\"x\":true}"
	var e baton.Event
	rest, extra, err := unpackEvent(p, &e)
	if err != nil {
		t.Fatal(err)
	}
	md := e.Metadata
	if e.Sequence != 7 || e.Timestamp != 1700000000000 || e.ID != "id" || e.Type != "chat.text" || md.TriggerAgentID != "" ||
		md.TriggerAgentName != "Ab" || md.EnvName != "é" || md.Source != "" || string(e.Payload) != `{"k":1}` || extra != "" {
		t.Fatalf("%+v, extra %q", e, extra)
	}
	var f baton.Event
	rest, extra, err = unpackEvent(rest, &f)
	if err != nil || rest != "" || f.Sequence != 8 || f.ID != "a" || f.Type != "b" || f.Payload != nil || extra != `{"x":true}` {
		t.Fatalf("%+v, extra %q, rest %q, %v", f, extra, rest, err)
	}
	big := strings.Repeat("x", 5000)
	if _, _, err := unpackEvent("1 2 1 1 0 0 0 0 5000 0 ab"+big, &e); err != nil || e.ID != "a" || e.Type != "b" || string(e.Payload) != big {
		t.Fatalf("%+v, %v", e, err)
	}
	for _, bad := range []string{"", "1 2 3", "1 2 x 0 0 0 0 0 0 0 ", "1 2 5 0 0 0 0 0 0 0 abc", "1 2 -1 0 0 0 0 0 0 0 abc",
		"1 2 2 2 0 0 0 0 0 0 abc", "1 2 1 1 0 0 0 0 3 0 ab", "1 2 1 1 0 0 0 0 0 -2 ab"} {
		if _, _, err := unpackEvent(bad, &baton.Event{}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
