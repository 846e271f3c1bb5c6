package sqlite

import (
	"strings"
	"testing"

	"github.com/batonhq/baton"
)

func TestUnpackEvent(t *testing.T) {
	var e baton.Event
	if err := unpackEvent("7 1700000000000 2 9 0 2 2 0 idchat.textAbé{\"k\":1}", &e); err != nil {
		t.Fatal(err)
	}
	md := e.Metadata
	if e.Sequence != 7 || e.Timestamp != 1700000000000 || e.ID != "id" || e.Type != "chat.text" || md.TriggerAgentID != "" ||
		md.TriggerAgentName != "Ab" || md.EnvName != "é" || md.Source != "" || string(e.Payload) != `{"k":1}` {
		t.Fatalf("%+v", e)
	}
	big := strings.Repeat("x", 5000)
	if err := unpackEvent("1 2 1 1 0 0 0 0 ab"+big, &e); err != nil || e.ID != "a" || e.Type != "b" || string(e.Payload) != big {
		t.Fatalf("%+v, %v", e, err)
	}
	for _, bad := range []string{"", "1 2 3", "1 2 x 0 0 0 0 0 ", "1 2 5 0 0 0 0 0 abc", "1 2 -1 0 0 0 0 0 abc", "1 2 2 2 0 0 0 0 abc"} {
		if err := unpackEvent(bad, &baton.Event{}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
