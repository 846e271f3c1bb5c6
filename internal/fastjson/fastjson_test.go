package fastjson

import (
	"encoding/json"
	"strings"
	"testing"
)

type view struct {
	Agent            string `json:"agent"`
	To               string `json:"to"`
	UIEventID        string `json:"ui_event_id"`
	AwaitingResponse bool   `json:"awaiting_response"`
	N                []int  `json:"n"`
}

// Where segmentio and encoding/json part ways, the answer is
// encoding/json's: a field of the wrong type does not hide the fields after
// it, and a document nested deeper than encoding/json allows is refused —
// without a stack overflow, which no recover would catch.
func TestAgreesWithEncodingJSON(t *testing.T) {
	deep := `{"agent":"a","x":` + strings.Repeat("[", 200000) + strings.Repeat("]", 200000) + `}`
	for _, doc := range []string{
		`{"agent":1,"to":"b","ui_event_id":"u"}`,
		`{"awaiting_response":"true","to":"b"}`,
		`{"agent":"a","n":[1,"x",3],"to":"c"}`,
		`{"agent":"a\xffb"}`,
		`{"Agent":"x","agent":"y"}`,
		``,
		`null`,
		deep,
		`{"agent":"a","x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
	} {
		var got, want view
		gerr, werr := Unmarshal([]byte(doc), &got), json.Unmarshal([]byte(doc), &want)
		if (gerr == nil) != (werr == nil) || got.Agent != want.Agent || got.To != want.To || got.UIEventID != want.UIEventID ||
			got.AwaitingResponse != want.AwaitingResponse || len(got.N) != len(want.N) {
			t.Errorf("%.60q: got %+v (%v), encoding/json %+v (%v)", doc, got, gerr, want, werr)
		}
		if Valid([]byte(doc)) != json.Valid([]byte(doc)) {
			t.Errorf("Valid(%.60q) = %v, encoding/json %v", doc, Valid([]byte(doc)), json.Valid([]byte(doc)))
		}
	}
}

// FuzzAgreesWithEncodingJSON decodes arbitrary documents both ways.
func FuzzAgreesWithEncodingJSON(f *testing.F) {
	for _, s := range []string{`{"agent":"a","to":"b"}`, `{"agent":1,"to":"b"}`, `[[[]]]`, `{"n":[1,2]}`, `{"agent":"\u00e9"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if Valid(data) != json.Valid(data) {
			t.Fatalf("Valid(%q) = %v, encoding/json %v", data, Valid(data), json.Valid(data))
		}
		var got, want view
		gerr, werr := Unmarshal(data, &got), json.Unmarshal(data, &want)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("Unmarshal(%q): %v, encoding/json %v", data, gerr, werr)
		}
		if got.Agent != want.Agent || got.To != want.To || got.UIEventID != want.UIEventID || got.AwaitingResponse != want.AwaitingResponse || len(got.N) != len(want.N) {
			t.Fatalf("Unmarshal(%q) = %+v, encoding/json %+v", data, got, want)
		}
	})
}
