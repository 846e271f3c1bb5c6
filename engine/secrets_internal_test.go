package engine

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
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

// TestBoundSecrets_ForkOpensWithoutResealing: a fork's copy of a sealed
// secret is the same ciphertext, marked with the chat it was sealed for;
// the copy's tools open it, a value moved to another chat without the mark
// does not open, and a fork of the fork keeps the first binding.
func TestBoundSecrets_ForkOpensWithoutResealing(t *testing.T) {
	s, err := newSealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := s.sealForm("chat-a", json.RawMessage(`{"KEY":"sk-canary-1"}`), []string{"KEY"})
	if err != nil {
		t.Fatal(err)
	}
	box, _, _ := mergeSealed(nil, sealed)
	all := func(string) bool { return true }
	if got := s.openAll("chat-b", box, all); len(got) != 0 {
		t.Fatalf("a box moved to another chat opened: %v", got)
	}
	copied := boundSecrets("chat-a", box, []string{"KEY", "OTHER"})
	if strings.Contains(string(copied), "sk-canary-1") || !strings.Contains(string(copied), sealed["KEY"]) {
		t.Fatalf("copy %s is not the sealed value, bound", copied)
	}
	if got := s.openAll("chat-b", copied, all); got["KEY"] != "sk-canary-1" {
		t.Fatalf("the fork's tools got %v", got)
	}
	again := boundSecrets("chat-b", copied, []string{"KEY"})
	if got := s.openAll("chat-c", again, all); got["KEY"] != "sk-canary-1" {
		t.Fatalf("the fork of the fork's tools got %v (box %s)", got, again)
	}
	if boundSecrets("chat-a", box, []string{"OTHER"}) != nil {
		t.Fatal("a secret not answered by the fork point was copied")
	}
}
