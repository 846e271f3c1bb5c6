package server

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton"
)

// oaiNodeDir holds the openai npm client (package.json; .ci/run installs
// its node_modules).
const oaiNodeDir = "testdata/oainode"

// TestChatCompletions_NodeClient runs the openai npm client against the
// live server: models, a conversation sent as full history (not streamed,
// then streamed with usage, then resent), and errors in OpenAI's shape as
// the client's error classes. It skips only outside CI when node or the
// package is missing.
func TestChatCompletions_NodeClient(t *testing.T) {
	node := nodeWith(t, oaiNodeDir, "openai")
	e := newEnv(t, withWorkflows(benchDir))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "client.mjs")
	cmd.Dir = oaiNodeDir
	cmd.Env = append(os.Environ(), "BATON_URL="+e.ts.URL, "BATON_KEY="+e.keys[scopeAda])
	var stderr strings.Builder
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client: %v\n%s", err, stderr.String())
	}
	type apiErr struct {
		Name, Code, Param, Type string
		Status                  int
	}
	var out struct {
		Models []string
		First  struct{ ID, Object, Content, Finish, ChatID string }
		Second struct {
			Content, Finish string
			Usage           struct {
				TotalTokens int `json:"total_tokens"`
			}
			Chunks, IDs int
			ChatIDs     []string
		}
		Again                               struct{ Content, ID string }
		BadModel, BadKey, BadRole, TooLarge apiErr
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("node client output: %v: %s", err, raw)
	}
	if !strings.Contains(strings.Join(out.Models, ","), "notify") {
		t.Errorf("models %v", out.Models)
	}
	if out.First.Content != "Hello! What can I do?" || out.First.Finish != "stop" || out.First.Object != "chat.completion" || !strings.HasPrefix(out.First.ID, "chatcmpl-") || out.First.ChatID == "" {
		t.Errorf("first %+v", out.First)
	}
	s := out.Second
	if s.Content != "Your report is ready: 12 pages." || s.Finish != "stop" || s.Usage.TotalTokens != 48 || s.IDs != 1 || len(s.ChatIDs) != 1 || s.ChatIDs[0] != out.First.ChatID {
		t.Errorf("second %+v (chat %s)", s, out.First.ChatID)
	}
	if out.Again.Content != s.Content {
		t.Errorf("again %+v", out.Again)
	}
	for what, got := range map[string]apiErr{"bad model": out.BadModel, "bad key": out.BadKey, "bad role": out.BadRole, "too large": out.TooLarge} {
		want := map[string]apiErr{
			"bad model": {Name: "NotFoundError", Status: 404, Code: "model_not_found", Param: "model", Type: "invalid_request_error"},
			"bad key":   {Name: "AuthenticationError", Status: 401, Code: "invalid_api_key", Type: "invalid_request_error"},
			"bad role":  {Name: "BadRequestError", Status: 400, Code: baton.EINVALID, Param: "messages[0].role", Type: "invalid_request_error"},
			"too large": {Name: "APIError", Status: 413, Code: "request_too_large", Type: "invalid_request_error"},
		}[what]
		if got != want {
			t.Errorf("%s: %+v, want %+v", what, got, want)
		}
	}
	e.waitStatus(t, out.First.ChatID, baton.ChatWaitingInput)
	if msgs := userTexts(t, e, out.First.ChatID); strings.Join(msgs, "|") != "Is my report ready?|Please check the weekly one." {
		t.Errorf("the chat recorded the person's messages %q", msgs)
	}
}
