package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/batonhq/baton"
)

// actionPlanSchema is the schema the test gives the generator's action_plan
// UI tool (which declares none in the examples).
const actionPlanSchema = `{"type":"object","description":"The plan to approve","properties":{"workflow":{"type":"object"},"agent_message":{"type":"string"}}}`

// workflowsWithSchema copies the example workflows, the generator's
// action_plan given parameters.
func workflowsWithSchema(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(examplesDir)); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "generator", "tools.json")
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	old := `"ui": {"component": "ActionPlan", "mode": "artifact"}`
	if !bytes.Contains(raw, []byte(old)) {
		t.Fatalf("%s no longer has %s", p, old)
	}
	raw = bytes.Replace(raw, []byte(old), []byte(old+`,
      "parameters": `+actionPlanSchema), 1)
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func sameJSON(t *testing.T, got, want string) bool {
	t.Helper()
	var g, w bytes.Buffer
	if err := json.Compact(&g, []byte(got)); err != nil {
		return false
	}
	if err := json.Compact(&w, []byte(want)); err != nil {
		t.Fatal(err)
	}
	return g.String() == w.String()
}

// TestChatCompletions_UIToolCallCarriesItsSchema: the tool call a UI tool
// becomes carries the tool's JSON Schema as function.parameters, in a
// completion and in the first delta of the call in a stream (a resent
// request, its reply read again); the models list the UI tools as function
// tools, and the secret form only as a form, never as a tool.
func TestChatCompletions_UIToolCallCarriesItsSchema(t *testing.T) {
	e := newEnv(t, withWorkflows(workflowsWithSchema(t)))
	ctx := oaiCtx(t)
	c := e.oaiClient(scopeAda)

	// The models list the UI tools before any call.
	m, err := c.Models.Get(ctx, "generator")
	if err != nil {
		t.Fatal(err)
	}
	checkModelTools(t, m.JSON.ExtraFields["baton"].Raw())
	list, err := c.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := false
	for _, m := range list.Data {
		if m.ID == "generator" {
			seen = true
			checkModelTools(t, m.JSON.ExtraFields["baton"].Raw())
		}
	}
	if !seen {
		t.Fatal("GET /v1/models lacks generator")
	}

	var resp *http.Response
	hist := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("I want to build an automation workflow.")}
	first, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "generator", Messages: hist}, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	chatID := resp.Header.Get("X-Baton-Chat-Id")
	hist = append(hist, first.Choices[0].Message.ToParam(), openai.UserMessage("A weekly newsletter from our team notes."))
	done := make(chan *openai.ChatCompletion, 1)
	go func() {
		cc, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "generator", Messages: hist})
		if err != nil {
			t.Errorf("second request: %v", err)
		}
		done <- cc
	}()
	ch := e.waitStatus(t, chatID, baton.ChatWaitingSecret)
	e.submitHTTP(t, &clientMessage{ChatID: chatID, UIEventID: ch.Pending[0].UIEventID, Status: "success", Data: json.RawMessage(`{"NEWSLETTER_API_KEY":"` + testSecret + `"}`)})
	var second *openai.ChatCompletion
	select {
	case second = <-done:
	case <-ctx.Done():
		t.Fatal("the reply did not go on after the secret form")
	}
	if second == nil || second.Choices[0].FinishReason != "tool_calls" || len(second.Choices[0].Message.ToolCalls) != 1 {
		t.Fatalf("second reply: %v", second)
	}
	tc := second.Choices[0].Message.ToolCalls[0]
	if p := tc.Function.JSON.ExtraFields["parameters"].Raw(); tc.Function.Name != "action_plan" || !sameJSON(t, p, actionPlanSchema) {
		t.Fatalf("tool call %s: parameters %s, want the UI tool's schema %s", tc.Function.Name, p, actionPlanSchema)
	}

	// The same request streamed: the reply read again, the schema in the
	// call's first delta.
	_, chunks := oaiStreamAll(t, c, ctx, openai.ChatCompletionNewParams{Model: "generator", Messages: hist})
	calls := 0
	for _, chunk := range chunks {
		if len(chunk.Choices) == 0 || len(chunk.Choices[0].Delta.ToolCalls) == 0 {
			continue
		}
		calls++
		d := chunk.Choices[0].Delta.ToolCalls[0]
		if calls == 1 && (d.ID != tc.ID || !sameJSON(t, d.Function.JSON.ExtraFields["parameters"].Raw(), actionPlanSchema)) {
			t.Errorf("the tool call's first delta %s: want id %s and the schema", chunk.RawJSON(), tc.ID)
		}
		if strings.Contains(chunk.RawJSON(), "collect_api_keys") || strings.Contains(chunk.RawJSON(), testSecret) {
			t.Errorf("a chunk names the secret form or its secret: %s", chunk.RawJSON())
		}
	}
	if calls == 0 {
		t.Fatal("the stream has no tool call")
	}
}

// checkModelTools checks a model's "baton" object: action_plan a function
// tool with its schema, the secret form listed as one and not as a tool.
func checkModelTools(t *testing.T, raw string) {
	t.Helper()
	var ext struct {
		Tools []struct {
			Type     string `json:"type"`
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
			Baton struct {
				Component string `json:"component"`
			} `json:"baton"`
		} `json:"tools"`
		SecretForms []struct {
			Name string `json:"name"`
		} `json:"secret_forms"`
	}
	if err := json.Unmarshal([]byte(raw), &ext); err != nil {
		t.Fatalf("the model's baton object %q: %v", raw, err)
	}
	if len(ext.Tools) != 1 {
		t.Fatalf("tools %s: want action_plan alone", raw)
	}
	tl := ext.Tools[0]
	if tl.Type != "function" || tl.Function.Name != "action_plan" || tl.Function.Description == "" ||
		!sameJSON(t, string(tl.Function.Parameters), actionPlanSchema) || tl.Baton.Component != "ActionPlan" {
		t.Errorf("tool %s", raw)
	}
	if len(ext.SecretForms) != 1 || ext.SecretForms[0].Name != "collect_api_keys" {
		t.Errorf("secret forms %s: want collect_api_keys", raw)
	}
}
