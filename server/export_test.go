package server

import (
	"bytes"
	"mime"
	"net/http"
	"strings"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/chatlog"
	"github.com/batonhq/baton/llm/scripted"
)

// exportedChat runs a generator chat of ada's to the action plan: the
// interview answered and the secret form filled in with testSecret.
func exportedChat(t *testing.T, e *env) string {
	t.Helper()
	id := e.start(t, "generator", nil)
	e.waitStatus(t, id, baton.ChatWaitingInput)
	e.submitHTTP(t, &clientMessage{ChatID: id, Content: ptr("A weekly newsletter.")})
	c := e.waitStatus(t, id, baton.ChatWaitingSecret)
	r := e.do(t, "POST", "/api/input/submit", e.keys[scopeAda], map[string]any{
		"chat_id": id, "ui_event_id": c.Pending[0].UIEventID, "data": map[string]string{"NEWSLETTER_API_KEY": testSecret},
	})
	if r.status != http.StatusAccepted {
		t.Fatalf("secret form: %d %s", r.status, r.body)
	}
	e.waitStatus(t, id, baton.ChatWaitingUITool)
	return id
}

// TestExport_ClientView: a server without full exports answers the
// download with what the person sees (the history's filter: no internal
// agent's text), as an attachment, never the secret;
// the scripted form, which would hold internal agents' replies, is 403;
// an unknown format is 400 naming it.
func TestExport_ClientView(t *testing.T) {
	e := newEnv(t)
	id := exportedChat(t, e)
	r := e.do(t, "GET", "/api/chats/acme/"+id+"/export", e.keys[scopeAda], nil)
	if r.status != http.StatusOK {
		t.Fatalf("export: %d %s", r.status, r.body)
	}
	if d, p, err := mime.ParseMediaType(r.header.Get("Content-Disposition")); err != nil || d != "attachment" || p["filename"] != "chat-"+id+".jsonl" {
		t.Errorf("Content-Disposition %q", r.header.Get("Content-Disposition"))
	}
	if ct := r.header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("Content-Type %q", ct)
	}
	f, err := chatlog.Read(bytes.NewReader(r.body))
	if err != nil {
		t.Fatalf("the export does not read back: %v\n%s", err, r.body)
	}
	if f.Header.View != chatlog.ViewClient || f.Header.ChatID != id || f.Header.Workflow != "generator" || f.Header.App != "acme" {
		t.Errorf("header %+v", f.Header)
	}
	for _, leak := range []string{testSecret, "CONCEPT_OVERVIEW", "__secrets"} {
		if bytes.Contains(r.body, []byte(leak)) {
			t.Errorf("the client view holds %q:\n%s", leak, r.body)
		}
	}
	if want := len(e.history(t, id)); len(f.Records) != want {
		t.Errorf("the client view has %d events, the history %d", len(f.Records), want)
	}
	if r := e.do(t, "GET", "/api/chats/acme/"+id+"/export?format=scripted", e.keys[scopeAda], nil); r.status != http.StatusForbidden || !strings.Contains(r.errorMessage(), "--export-full") {
		t.Errorf("scripted without full exports: %d %s", r.status, r.body)
	}
	if r := e.do(t, "GET", "/api/chats/acme/"+id+"/export?format=xml", e.keys[scopeAda], nil); r.status != http.StatusBadRequest || !strings.Contains(r.errorMessage(), "format") {
		t.Errorf("format=xml: %d %s", r.status, r.body)
	}
}

// TestExport_Full: with full exports the file holds every recorded event,
// hidden and internal ones included, and still never the secret; the
// scripted form is a scripted.json the scripted provider loads.
func TestExport_Full(t *testing.T) {
	e := newEnv(t, withConfig(func(c *Config) { c.FullExport = true }))
	id := exportedChat(t, e)
	chat, err := e.store.GetChat(t.Context(), scopeAda, id)
	if err != nil {
		t.Fatal(err)
	}
	r := e.do(t, "GET", "/api/chats/acme/"+id+"/export", e.keys[scopeAda], nil)
	if r.status != http.StatusOK {
		t.Fatalf("export: %d %s", r.status, r.body)
	}
	f, err := chatlog.Read(bytes.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if f.Header.View != chatlog.ViewFull || int64(len(f.Records)) != chat.LastSequence || f.Records[len(f.Records)-1].Sequence != chat.LastSequence {
		t.Fatalf("full export: view %s, %d events, chat's last sequence %d", f.Header.View, len(f.Records), chat.LastSequence)
	}
	if !bytes.Contains(r.body, []byte("CONCEPT_OVERVIEW")) {
		t.Error("the full export lacks the internal agent's text")
	}
	if bytes.Contains(r.body, []byte(testSecret)) || bytes.Contains(r.body, []byte("__secrets")) {
		t.Error("the full export holds the secret")
	}
	r = e.do(t, "GET", "/api/chats/acme/"+id+"/export?format=scripted", e.keys[scopeAda], nil)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("scripted: %d %s", r.status, r.body)
	}
	if bytes.Contains(r.body, []byte(testSecret)) {
		t.Error("the scripted.json holds the secret")
	}
	p, err := scripted.Parse("scripted.json", r.body)
	if err != nil {
		t.Fatalf("the exported scripted.json does not load: %v\n%s", err, r.body)
	}
	if got := strings.Join(sorted(p.Agents()), ","); got != "ActionPlanAgent,ContextVariablesAgent,InterviewAgent" {
		t.Errorf("scripted agents: %s", got)
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}
