package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/batonhq/baton"
)

// The OpenAI Chat Completions API, driven by the official openai-go client
// against the live server (and, in chatcompletions_node_test.go, by the
// openai npm client).

// oaiClient is an openai-go client of the test server as scope.
func (e *env) oaiClient(scope baton.Scope, opts ...option.RequestOption) *openai.Client {
	c := openai.NewClient(append([]option.RequestOption{
		option.WithBaseURL(e.ts.URL + "/v1/"), option.WithAPIKey(e.keys[scope]), option.WithMaxRetries(0),
		option.WithHTTPClient(e.ts.Client()),
	}, opts...)...)
	return &c
}

func oaiCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// oaiStreamAll streams a completion and returns it accumulated, with every
// chunk.
func oaiStreamAll(t *testing.T, c *openai.Client, ctx context.Context, p openai.ChatCompletionNewParams, opts ...option.RequestOption) (openai.ChatCompletion, []openai.ChatCompletionChunk) {
	t.Helper()
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s := c.Chat.Completions.NewStreaming(ctx, p, opts...)
	var acc openai.ChatCompletionAccumulator
	var chunks []openai.ChatCompletionChunk
	for s.Next() {
		ch := s.Current()
		chunks = append(chunks, ch)
		if !acc.AddChunk(ch) {
			t.Fatalf("the accumulator refused chunk %d: %s", len(chunks), ch.RawJSON())
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	return acc.ChatCompletion, chunks
}

func TestChatCompletions_HelloNotStreaming(t *testing.T) {
	e := newEnv(t)
	ctx := oaiCtx(t)
	var resp *http.Response
	got, err := e.oaiClient(scopeAda).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "hello",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("ignored"), openai.UserMessage("What time is it in UTC?")},
	}, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	chatID := resp.Header.Get("X-Baton-Chat-Id")
	if chatID == "" || got.JSON.ExtraFields["chat_id"].Raw() != `"`+chatID+`"` {
		t.Fatalf("chat id: header %q, body %s", chatID, got.RawJSON())
	}
	if !strings.HasPrefix(got.ID, "chatcmpl-") || got.Object != "chat.completion" || got.Model != "hello" || got.Created == 0 {
		t.Errorf("id %q object %q model %q created %d", got.ID, got.Object, got.Model, got.Created)
	}
	if len(got.Choices) != 1 {
		t.Fatalf("%d choices", len(got.Choices))
	}
	ch := got.Choices[0]
	if ch.FinishReason != "stop" || ch.Message.Role != "assistant" || ch.Message.Content != "Hello! I checked the clock in UTC for you. Have a wonderful day!" {
		t.Errorf("choice: finish %q role %q content %q", ch.FinishReason, ch.Message.Role, ch.Message.Content)
	}
	if name := ch.Message.JSON.ExtraFields["name"].Raw(); name != `"Greeter"` {
		t.Errorf("message name %s, want the agent Greeter", name)
	}
	if got.Usage.PromptTokens != 290 || got.Usage.CompletionTokens != 38 || got.Usage.TotalTokens != 328 {
		t.Errorf("usage %+v, want the two model calls' 290+38", got.Usage)
	}
	c := e.waitStatus(t, chatID, baton.ChatCompleted)
	if c.Workflow != "hello" {
		t.Errorf("chat %+v", c)
	}
	// The person's message is the chat's first, in place of the workflow's initial_message.
	if msgs := userTexts(t, e, chatID); len(msgs) != 1 || msgs[0] != "What time is it in UTC?" {
		t.Errorf("the chat's user messages: %q", msgs)
	}
}

func TestChatCompletions_HelloStreaming(t *testing.T) {
	e := newEnv(t)
	ctx := oaiCtx(t)
	var resp *http.Response
	got, chunks := oaiStreamAll(t, e.oaiClient(scopeAda), ctx, openai.ChatCompletionNewParams{
		Model:    "hello",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What time is it in UTC?")},
	}, option.WithResponseInto(&resp))
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	if len(got.Choices) != 1 || got.Choices[0].Message.Content != "Hello! I checked the clock in UTC for you. Have a wonderful day!" || got.Choices[0].FinishReason != "stop" {
		t.Fatalf("accumulated %s", got.RawJSON())
	}
	if len(chunks) < 4 {
		t.Fatalf("%d chunks", len(chunks))
	}
	for i, c := range chunks {
		if c.ID != chunks[0].ID || !strings.HasPrefix(c.ID, "chatcmpl-") || c.Object != "chat.completion.chunk" || c.Model != "hello" {
			t.Errorf("chunk %d: %s", i, c.RawJSON())
		}
	}
	if d := chunks[0].Choices[0].Delta; d.Role != "assistant" {
		t.Errorf("the first chunk's delta %s, want the role", chunks[0].RawJSON())
	}
	last := chunks[len(chunks)-1]
	if len(last.Choices) != 0 || last.Usage.TotalTokens != 328 {
		t.Errorf("the usage chunk %s: want empty choices and 328 tokens", last.RawJSON())
	}
	if fin := chunks[len(chunks)-2]; len(fin.Choices) != 1 || fin.Choices[0].FinishReason != "stop" {
		t.Errorf("the finish chunk %s", fin.RawJSON())
	}
	e.waitStatus(t, resp.Header.Get("X-Baton-Chat-Id"), baton.ChatCompleted)
}

// TestChatCompletions_StreamWireFormat reads the stream as bytes: data
// lines only (and comments), "usage": null in every chunk but the usage
// chunk when it is asked for, none at all when it is not, and "data: [DONE]" last.
func TestChatCompletions_StreamWireFormat(t *testing.T) {
	e := newEnv(t)
	for _, include := range []bool{true, false} {
		body := map[string]any{"model": "hello", "stream": true, "messages": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "What time is it?"}}}}}
		if include {
			body["stream_options"] = map[string]any{"include_usage": true}
		}
		r := e.do(t, "POST", "/v1/chat/completions", e.keys[scopeAda], body)
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		var datas []string
		sc := bufio.NewScanner(strings.NewReader(string(r.body)))
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "" || strings.HasPrefix(line, ":"):
			case strings.HasPrefix(line, "data: "):
				datas = append(datas, strings.TrimPrefix(line, "data: "))
			default:
				t.Errorf("line %q is not an SSE data line", line)
			}
		}
		if len(datas) < 3 || datas[len(datas)-1] != "[DONE]" {
			t.Fatalf("events %q: want [DONE] last", datas)
		}
		for i, d := range datas[:len(datas)-1] {
			var m map[string]json.RawMessage
			if err := json.Unmarshal([]byte(d), &m); err != nil {
				t.Fatalf("chunk %d: %v: %s", i, err, d)
			}
			u, has := m["usage"]
			isUsage := i == len(datas)-2 && include
			switch {
			case !include && has:
				t.Errorf("chunk %d has usage without include_usage: %s", i, d)
			case include && !isUsage && string(u) != "null":
				t.Errorf("chunk %d: usage %s, want null", i, u)
			case isUsage && (string(m["choices"]) != "[]" || !strings.Contains(string(u), `"total_tokens":328`)):
				t.Errorf("usage chunk %s", d)
			}
		}
	}
}

// userTexts returns the person's messages the chat recorded.
func userTexts(t *testing.T, e *env, chatID string) []string {
	t.Helper()
	evs, err := e.store.Events(context.Background(), scopeAda, chatID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		if ev.Type != baton.TypeChatText {
			continue
		}
		p, err := baton.DecodePayload[baton.TextPayload](&ev)
		if err != nil {
			t.Fatal(err)
		}
		if p.Agent == "user" && !p.UIHidden {
			out = append(out, p.Content)
		}
	}
	return out
}

// TestChatCompletions_FullHistoryContinuesOneChat: a client that sends
// the whole history every time (Open WebUI, LibreChat) continues one chat;
// sending the same history again records no message twice and answers with
// the recorded reply.
func TestChatCompletions_FullHistoryContinuesOneChat(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir))
	ctx := oaiCtx(t)
	c := e.oaiClient(scopeAda)
	// Another chat of the workflow, newer than the conversation's, that
	// the history must not be taken for.
	hist := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Is my report ready?")}
	var resp *http.Response
	first, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "notify", Messages: hist}, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	chatID := resp.Header.Get("X-Baton-Chat-Id")
	if first.Choices[0].Message.Content != "Hello! What can I do?" || first.Choices[0].FinishReason != "stop" {
		t.Fatalf("first reply %s", first.RawJSON())
	}
	other, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "notify", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Something else")}}, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	otherID := resp.Header.Get("X-Baton-Chat-Id")
	if otherID == chatID || other.Choices[0].Message.Content == "" {
		t.Fatalf("a new conversation went to chat %s (the first is %s)", otherID, chatID)
	}

	hist = append(hist, first.Choices[0].Message.ToParam(), openai.UserMessage("Please check the weekly one."))
	p := openai.ChatCompletionNewParams{Model: "notify", Messages: hist}
	second, _ := oaiStreamAll(t, c, ctx, p, option.WithResponseInto(&resp))
	if got := resp.Header.Get("X-Baton-Chat-Id"); got != chatID {
		t.Fatalf("the full history went to chat %s, want %s", got, chatID)
	}
	if second.Choices[0].Message.Content != "Your report is ready: 12 pages." {
		t.Fatalf("second reply %s", second.RawJSON())
	}
	// The same request again (a client's retry): the same reply, nothing recorded twice.
	again, err := c.Chat.Completions.New(ctx, p, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("X-Baton-Chat-Id") != chatID || again.Choices[0].Message.Content != "Your report is ready: 12 pages." || again.ID != second.ID {
		t.Fatalf("resent: chat %s, %s (first id %s)", resp.Header.Get("X-Baton-Chat-Id"), again.RawJSON(), second.ID)
	}
	e.waitStatus(t, chatID, baton.ChatWaitingInput)
	if msgs := userTexts(t, e, chatID); strings.Join(msgs, "|") != "Is my report ready?|Please check the weekly one." {
		t.Fatalf("the chat recorded the person's messages %q", msgs)
	}
	if msgs := userTexts(t, e, otherID); len(msgs) != 1 {
		t.Fatalf("the other chat recorded %q", msgs)
	}
	// By chat id, with only the new message: the same chat. The script
	// has no third answer, so the run fails: an OpenAI error that the
	// SDK, retries on, does not retry (the message was taken once).
	_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "notify", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Thanks!")}},
		option.WithHeader("X-Baton-Chat-Id", chatID), option.WithMaxRetries(2))
	if a := asAPIError(t, err); a.StatusCode != 503 || a.Code != "chat_error" || a.Response.Header.Get("X-Baton-Chat-Id") != chatID {
		t.Fatalf("a failed run: %d %q %q", a.StatusCode, a.Code, a.Message)
	}
	if msgs := userTexts(t, e, chatID); len(msgs) != 3 || msgs[2] != "Thanks!" {
		t.Fatalf("the chat recorded %q", msgs)
	}
}

// TestChatCompletions_RetryByChatIDWithKey: a message sent alone to a chat
// (X-Baton-Chat-Id) with an Idempotency-Key, resent after its answer was
// recorded (the client lost it), gets the same answer and is recorded once.
func TestChatCompletions_RetryByChatIDWithKey(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir))
	ctx := oaiCtx(t)
	c := e.oaiClient(scopeAda)
	var resp *http.Response
	if _, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "notify", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Is my report ready?")}}, option.WithResponseInto(&resp)); err != nil {
		t.Fatal(err)
	}
	chatID := resp.Header.Get("X-Baton-Chat-Id")
	p := openai.ChatCompletionNewParams{Model: "notify", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Please check the weekly one.")}}
	opts := []option.RequestOption{option.WithHeader("X-Baton-Chat-Id", chatID), option.WithHeader("Idempotency-Key", "k-1")}
	first, err := c.Chat.Completions.New(ctx, p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	e.waitStatus(t, chatID, baton.ChatWaitingInput)
	again, err := c.Chat.Completions.New(ctx, p, opts...)
	if err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if want := "Your report is ready: 12 pages."; first.Choices[0].Message.Content != want || again.Choices[0].Message.Content != want {
		t.Fatalf("replies %q and %q, want %q twice", first.Choices[0].Message.Content, again.Choices[0].Message.Content, want)
	}
	if msgs := userTexts(t, e, chatID); len(msgs) != 2 {
		t.Fatalf("the person's messages %q: the retry is recorded again", msgs)
	}
}

// TestChatCompletions_UIToolAnsweredByToolMessage runs the generator: the
// secret form is never answered over this API (the reply says where, and
// goes on once it is answered in the web UI's way), the action plan is a
// tool call, and a tool message answers it.
func TestChatCompletions_UIToolAnsweredByToolMessage(t *testing.T) {
	e := newEnv(t)
	ctx := oaiCtx(t)
	c := e.oaiClient(scopeAda)
	var resp *http.Response
	hist := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("I want to build an automation workflow.")}
	first, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "generator", Messages: hist}, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	chatID := resp.Header.Get("X-Baton-Chat-Id")
	if first.Choices[0].Message.Content != "What would you like to automate?" || first.Choices[0].Message.JSON.ExtraFields["name"].Raw() != `"InterviewAgent"` {
		t.Fatalf("first reply %s", first.RawJSON())
	}
	hist = append(hist, first.Choices[0].Message.ToParam(), openai.UserMessage("A weekly newsletter from our team notes."))

	// The reply waits for the secret form, which is answered the web UI's way.
	type result struct {
		cc     openai.ChatCompletion
		chunks []openai.ChatCompletionChunk
	}
	done := make(chan result, 1)
	go func() {
		p := openai.ChatCompletionNewParams{Model: "generator", Messages: hist,
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}
		s := c.Chat.Completions.NewStreaming(ctx, p)
		var acc openai.ChatCompletionAccumulator
		var r result
		for s.Next() {
			r.chunks = append(r.chunks, s.Current())
			acc.AddChunk(s.Current())
		}
		if s.Err() != nil {
			r.chunks = nil
		}
		r.cc = acc.ChatCompletion
		done <- r
	}()
	ch := e.waitStatus(t, chatID, baton.ChatWaitingSecret)
	e.submitHTTP(t, &clientMessage{ChatID: chatID, UIEventID: ch.Pending[0].UIEventID, Status: "success", Data: json.RawMessage(`{"NEWSLETTER_API_KEY":"` + testSecret + `"}`)})
	var second result
	select {
	case second = <-done:
	case <-ctx.Done():
		t.Fatal("the reply did not go on after the secret form")
	}
	if second.chunks == nil {
		t.Fatal("the stream failed")
	}
	msg := second.cc.Choices[0].Message
	if second.cc.Choices[0].FinishReason != "tool_calls" || len(msg.ToolCalls) != 1 {
		t.Fatalf("second reply %s", second.cc.RawJSON())
	}
	if !strings.Contains(msg.Content, "#chat="+chatID) || strings.Contains(msg.Content, testSecret) {
		t.Errorf("the reply does not send the person to the form of chat %s: %q", chatID, msg.Content)
	}
	tc := msg.ToolCalls[0]
	if tc.Function.Name != "action_plan" || !strings.Contains(tc.Function.Arguments, "Weekly Newsletter") {
		t.Fatalf("tool call %+v", tc)
	}
	for _, chunk := range second.chunks {
		if strings.Contains(chunk.RawJSON(), testSecret) {
			t.Fatalf("a chunk carries the secret: %s", chunk.RawJSON())
		}
	}
	// A person's message while the tool call waits is refused, naming what to do.
	_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "generator", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hm?")}}, option.WithHeader("X-Baton-Chat-Id", chatID))
	if apiErr := asAPIError(t, err); apiErr.StatusCode != 409 || apiErr.Code != "tool_call_pending" {
		t.Errorf("a message while a tool call waits: %d %s %s", apiErr.StatusCode, apiErr.Code, apiErr.Message)
	}

	hist = append(hist, msg.ToParam(), openai.ToolMessage(`{"action":"approve"}`, tc.ID))
	third, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "generator", Messages: hist}, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("X-Baton-Chat-Id") != chatID || third.Choices[0].FinishReason != "stop" || !strings.Contains(third.Choices[0].Message.Content, "Weekly Newsletter workflow is approved") {
		t.Fatalf("third reply (chat %s): %s", resp.Header.Get("X-Baton-Chat-Id"), third.RawJSON())
	}
	e.waitStatus(t, chatID, baton.ChatCompleted)
	// The tool result was recorded once, as the UI tool's response.
	evs, _ := e.store.Events(ctx, scopeAda, chatID, 0, 0)
	n := 0
	for _, ev := range evs {
		if ev.Type == baton.TypeChatToolResponse {
			if p, _ := baton.DecodePayload[baton.ToolResponsePayload](&ev); p.UIEventID == tc.ID {
				n++
			}
		}
	}
	if n != 1 {
		t.Errorf("the UI tool's response was recorded %d times", n)
	}
	// Resent, the conversation's tool message is the same input: the same reply.
	again, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "generator", Messages: hist})
	if err != nil || again.Choices[0].Message.Content != third.Choices[0].Message.Content {
		t.Fatalf("resent: %v %s", err, again.RawJSON())
	}
}

func asAPIError(t *testing.T, err error) *openai.Error {
	t.Helper()
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("error %v (%T), want an API error", err, err)
	}
	return apiErr
}

func TestChatCompletions_Errors(t *testing.T) {
	e := newEnv(t, withConfig(func(c *Config) { c.MaxBody = 4096 }))
	ctx := oaiCtx(t)
	hi := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}

	_, err := e.oaiClient(scopeAda).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "nope", Messages: hi})
	if a := asAPIError(t, err); a.StatusCode != 404 || a.Code != "model_not_found" || a.Param != "model" || a.Type != "invalid_request_error" {
		t.Errorf("unknown model: %d %q %q %q %q", a.StatusCode, a.Type, a.Code, a.Param, a.Message)
	}
	bad := openai.NewClient(option.WithBaseURL(e.ts.URL+"/v1/"), option.WithAPIKey("bk_wrong"), option.WithMaxRetries(0))
	_, err = (&bad).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "hello", Messages: hi})
	if a := asAPIError(t, err); a.StatusCode != 401 || a.Code != "invalid_api_key" {
		t.Errorf("bad key: %d %q %q", a.StatusCode, a.Code, a.Message)
	}
	_, err = bad.Models.List(ctx)
	if a := asAPIError(t, err); a.StatusCode != 401 {
		t.Errorf("bad key, models: %d", a.StatusCode)
	}
	big := []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strings.Repeat("x", 5000))}
	_, err = e.oaiClient(scopeAda).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "hello", Messages: big})
	if a := asAPIError(t, err); a.StatusCode != 413 || a.Code != "request_too_large" {
		t.Errorf("oversized: %d %q %q", a.StatusCode, a.Code, a.Message)
	}

	// Bad input names the field, as OpenAI's param.
	for _, tc := range []struct{ body, param string }{
		{`{"model":"hello"}`, "messages"},
		{`{"messages":[{"role":"user","content":"hi"}]}`, "model"},
		{`{"model":"hello","messages":[{"role":"wizard","content":"hi"}]}`, "messages[0].role"},
		{`{"model":"hello","messages":[{"role":"user","content":""}]}`, "messages[0].content"},
		{`{"model":"hello","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, "messages[0].content[0].type"},
		{`{"model":"hello","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}`, "messages[1].role"},
		{`{"model":"hello","messages":[{"role":"user","content":"hi"}],"n":2}`, "n"},
		{`{"model":"hello","messages":"hi"}`, "messages"},
		{`{"model":"hello","messages":[{"role":"tool","content":"{}"}]}`, "messages[0].tool_call_id"},
	} {
		r := e.do(t, "POST", "/v1/chat/completions", e.keys[scopeAda], tc.body)
		var b oaiErrorBody
		if err := json.Unmarshal(r.body, &b); err != nil || r.status != 400 || b.Error.Param == nil || *b.Error.Param != tc.param || b.Error.Type != "invalid_request_error" {
			t.Errorf("%s: %d %s, want 400 naming %s", tc.body, r.status, r.body, tc.param)
		}
	}
	// Unknown /v1 paths are the API's 404, not the UI.
	if r := e.do(t, "GET", "/v1/nope", e.keys[scopeAda], nil); r.status != 404 || !strings.Contains(r.header.Get("Content-Type"), "json") {
		t.Errorf("GET /v1/nope: %d %s", r.status, r.header.Get("Content-Type"))
	}
}

func TestChatCompletions_Models(t *testing.T) {
	e := newEnv(t)
	ctx := oaiCtx(t)
	c := e.oaiClient(scopeAda)
	page, err := c.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
		if m.Object != "model" || m.OwnedBy != "acme" || m.Created == 0 {
			t.Errorf("model %s", m.RawJSON())
		}
	}
	if strings.Join(ids, ",") != "generator,hello" {
		t.Errorf("models %v", ids)
	}
	m, err := c.Models.Get(ctx, "hello")
	if err != nil || m.ID != "hello" {
		t.Fatalf("get hello: %v %s", err, m.RawJSON())
	}
	_, err = c.Models.Get(ctx, "nope")
	if a := asAPIError(t, err); a.StatusCode != 404 || a.Code != "model_not_found" {
		t.Errorf("get nope: %d %q", a.StatusCode, a.Code)
	}
}

// TestChatCompletions_OtherTenantsChat: another tenant's chat id is not
// found, never its data, and a history of another tenant's chat starts a
// chat of one's own.
func TestChatCompletions_OtherTenantsChat(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir))
	ctx := oaiCtx(t)
	var resp *http.Response
	hist := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Is my report ready?")}
	first, err := e.oaiClient(scopeAda).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "notify", Messages: hist}, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	adaChat := resp.Header.Get("X-Baton-Chat-Id")
	e.waitStatus(t, adaChat, baton.ChatWaitingInput)
	for _, sc := range []baton.Scope{scopeBob, scopeMallory} {
		_, err := e.oaiClient(sc).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "notify", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me everything")}},
			option.WithHeader("X-Baton-Chat-Id", adaChat))
		a := asAPIError(t, err)
		if a.StatusCode != 404 || a.Code != "chat_not_found" || strings.Contains(a.RawJSON(), "Is my report") {
			t.Errorf("%v with ada's chat id: %d %s", sc, a.StatusCode, a.RawJSON())
		}
		// The same history from another tenant is not ada's conversation.
		h := append(hist, first.Choices[0].Message.ToParam(), openai.UserMessage("And the weekly one?"))
		_, err = e.oaiClient(sc).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "notify", Messages: h}, option.WithResponseInto(&resp))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Header.Get("X-Baton-Chat-Id"); got == adaChat {
			t.Errorf("%v continued ada's chat", sc)
		}
	}
	if msgs := userTexts(t, e, adaChat); len(msgs) != 1 {
		t.Errorf("ada's chat got messages from others: %q", msgs)
	}
}

// TestChatCompletions_CompletedChat: a conversation whose workflow ended
// says so.
func TestChatCompletions_CompletedChat(t *testing.T) {
	e := newEnv(t)
	ctx := oaiCtx(t)
	c := e.oaiClient(scopeAda)
	hist := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What time is it?")}
	first, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "hello", Messages: hist})
	if err != nil {
		t.Fatal(err)
	}
	hist = append(hist, first.Choices[0].Message.ToParam(), openai.UserMessage("And in Paris?"))
	_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "hello", Messages: hist})
	if a := asAPIError(t, err); a.StatusCode != 409 || a.Code != "chat_completed" {
		t.Errorf("a completed chat: %d %q %q", a.StatusCode, a.Code, a.Message)
	}
}

// TestChatCompletions_DevMode: without a key, on loopback, the app is
// X-Baton-App's (default "default").
func TestChatCompletions_DevMode(t *testing.T) {
	e := newEnv(t, withConfig(func(c *Config) { c.Dev = true }))
	r := e.do(t, "POST", "/v1/chat/completions", "", `{"model":"hello","messages":[{"role":"user","content":"hi"}]}`, "X-Baton-App", "acme")
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	id := r.header.Get("X-Baton-Chat-Id")
	if _, err := e.store.GetChat(context.Background(), baton.Scope{App: "acme", User: DevUser}, id); err != nil {
		t.Fatalf("the chat of dev in acme: %v", err)
	}
	if r := e.do(t, "GET", "/v1/models", "", nil); r.status != 200 || !strings.Contains(string(r.body), `"owned_by":"default"`) {
		t.Errorf("models in dev mode: %d %s", r.status, r.body)
	}
}
