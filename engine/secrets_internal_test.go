package engine

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/batonhq/baton"
)

// A form's answer is sealed only for the names the form declares, and a
// tool gets only the sealed secrets the workflow still declares: a secret
// kept under another name (before the form changed, say) reaches no tool.
func TestSealer_OnlyDeclaredNames(t *testing.T) {
	s, err := newSealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	declared := []string{"API_KEY", "OTHER_KEY"}
	if _, err := s.sealForm("c1", json.RawMessage(`{"API_KEY":"k","LD_PRELOAD":"/tmp/x.so"}`), declared); !errors.Is(err, baton.ErrInvalid) {
		t.Fatalf("an undeclared name: %v, want invalid", err)
	}
	if _, err := s.sealForm("c1", json.RawMessage(`{"API_KEY":""}`), declared); !errors.Is(err, baton.ErrInvalid) {
		t.Fatalf("an empty secret: %v, want invalid", err)
	}
	sealed, err := s.sealForm("c1", json.RawMessage(`{"API_KEY":"k"}`), declared)
	if err != nil {
		t.Fatal(err)
	}
	old, err := s.seal("c1", "RETIRED", "r")
	if err != nil {
		t.Fatal(err)
	}
	sealed["RETIRED"] = old
	box, _ := json.Marshal(sealed)
	got := s.openAll("c1", box, func(name string) bool { return slices.Contains(declared, name) })
	if want := map[string]string{"API_KEY": "k"}; !maps.Equal(got, want) {
		t.Fatalf("opened %v, want %v", got, want)
	}
	if got := s.openAll("c2", box, func(string) bool { return true }); len(got) != 0 {
		t.Fatalf("another chat's box opened: %v", got)
	}
}
