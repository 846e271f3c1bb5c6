package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/batonhq/baton"
	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"
)

// TestRequestMatchesSDK holds requestBody to the SDK: for each request, its
// body is the JSON the SDK's ChatCompletionNewParams (built as the provider
// built them before it encoded its own body, sdkParams) marshals to, with
// NewStreaming's "stream": true.
func TestRequestMatchesSDK(t *testing.T) {
	temp, seed, zero := 0.2, int64(42), 0.0
	tools := []baton.ToolDef{
		{Name: "get_time", Description: "Current time", Strict: true,
			Parameters: json.RawMessage(`{"type":"object","properties":{"tz":{"type":"string"}},"required":["tz"],"additionalProperties":false}`)},
		{Name: "noargs"},
		{Name: "loose", Description: "d", Parameters: json.RawMessage(` {"type": "object"} `)},
	}
	msgs := []baton.Message{
		{Role: baton.RoleSystem, Name: "Planner", Content: "You plan."},
		{Role: baton.RoleUser, Name: "user", Content: "plan a trip \u2028 <b>&</b> \"q\""},
		{Role: baton.RoleUser, Content: ""},
		{Role: baton.RoleAssistant, Name: "Planner", ToolCalls: []baton.ToolCall{{ID: "call_1", Name: "get_time", Arguments: `{"tz":"UTC"}`}, {ID: "call_2", Name: "noargs"}}},
		{Role: baton.RoleTool, ToolCallID: "call_1", Content: "12:00"},
		{Role: baton.RoleTool, Name: "ignored", ToolCallID: "call_2", Content: ""},
		{Role: baton.RoleAssistant, Name: "Travel Agent (éé)", Content: "It is noon.", ToolCalls: []baton.ToolCall{{ID: "c3", Name: "x", Arguments: "{}"}}},
		{Role: baton.RoleAssistant, Content: ""},
	}
	rf := &baton.ResponseFormat{Name: "Plan", Schema: json.RawMessage(`{"type":"object","properties":{"steps":{"type":"array","items":{"type":"string"}}}}`)}
	for i, req := range []*baton.Request{
		{Messages: msgs[:2], Params: baton.ModelParams{Model: "gpt-4o-mini"}},
		{Messages: msgs, Tools: tools, Params: baton.ModelParams{Model: "gpt-4.1", Temperature: &temp, Seed: &seed, MaxTokens: 256}},
		{Messages: msgs, ResponseFormat: rf, Params: baton.ModelParams{Model: "m", Temperature: &zero, MaxTokens: 1}},
	} {
		for _, openAI := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d/openai=%v", i, openAI), func(t *testing.T) {
				got, err := requestBody(req, openAI)
				if err != nil {
					t.Fatal(err)
				}
				params, err := sdkParams(req, openAI)
				if err != nil {
					t.Fatal(err)
				}
				want, err := json.Marshal(params)
				if err != nil {
					t.Fatal(err)
				}
				var g, w map[string]any
				if err := json.Unmarshal(got, &g); err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(want, &w); err != nil {
					t.Fatal(err)
				}
				w["stream"] = true // what NewStreaming adds
				if !reflect.DeepEqual(g, w) {
					t.Errorf("body\n got %s\nwant %s", got, want)
				}
			})
		}
	}
}

// TestRequestBodyErrors checks that a request the provider cannot send
// fails with an error naming the part at fault.
func TestRequestBodyErrors(t *testing.T) {
	ok := []baton.Message{{Role: baton.RoleUser, Content: "hi"}}
	for _, tc := range []struct {
		req  baton.Request
		want string
	}{
		{baton.Request{Messages: ok}, "no model configured"},
		{baton.Request{Messages: []baton.Message{{Role: baton.RoleTool, Content: "x"}}, Params: baton.ModelParams{Model: "m"}}, "messages[0]: tool message without tool_call_id"},
		{baton.Request{Messages: []baton.Message{{Role: "robot"}}, Params: baton.ModelParams{Model: "m"}}, `messages[0]: unknown role "robot"`},
		{baton.Request{Messages: ok, Tools: []baton.ToolDef{{Name: "t", Parameters: json.RawMessage(`[1]`)}}, Params: baton.ModelParams{Model: "m"}}, `tools[0] "t": parameters: not a JSON object`},
		{baton.Request{Messages: ok, Tools: []baton.ToolDef{{Name: "t", Parameters: json.RawMessage(`{"a":`)}}, Params: baton.ModelParams{Model: "m"}}, `tools[0] "t": parameters: not a JSON object`},
		{baton.Request{Messages: ok, ResponseFormat: &baton.ResponseFormat{Name: "R", Schema: json.RawMessage(`{`)}, Params: baton.ModelParams{Model: "m"}}, `response format "R": schema is not valid JSON`},
	} {
		if _, err := requestBody(&tc.req, false); err == nil || err.Error() != tc.want {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
}

// BenchmarkRequestBody encodes a turn's second request (system, person,
// tool call, tool result; one tool) both ways.
func BenchmarkRequestBody(b *testing.B) {
	seed := int64(7)
	req := &baton.Request{
		Messages: []baton.Message{
			{Role: baton.RoleSystem, Name: "Assistant", Content: "You answer after echoing."},
			{Role: baton.RoleUser, Name: "user", Content: "What is a baton?"},
			{Role: baton.RoleAssistant, Name: "Assistant", ToolCalls: []baton.ToolCall{{ID: "call_1", Name: "echo", Arguments: `{"text":"hello"}`}}},
			{Role: baton.RoleTool, ToolCallID: "call_1", Content: "hello"},
		},
		Tools:  []baton.ToolDef{{Name: "echo", Description: "Echo the text.", Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`)}},
		Params: baton.ModelParams{Model: "gpt-4o-mini", Seed: &seed},
	}
	b.Run("lean", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := requestBody(req, false); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sdk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p, err := sdkParams(req, false)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := json.Marshal(p); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// sdkParams is how the provider built the SDK's parameters before it
// encoded its own body: the reference requestBody is held to.
func sdkParams(req *baton.Request, openAI bool) (sdk.ChatCompletionNewParams, error) {
	if req.Params.Model == "" {
		return sdk.ChatCompletionNewParams{}, errors.New("no model configured")
	}
	params := sdk.ChatCompletionNewParams{
		Model:         shared.ChatModel(req.Params.Model),
		Messages:      make([]sdk.ChatCompletionMessageParamUnion, 0, len(req.Messages)),
		StreamOptions: sdk.ChatCompletionStreamOptionsParam{IncludeUsage: param.NewOpt(true)},
	}
	for i := range req.Messages {
		m, err := sdkMessage(&req.Messages[i])
		if err != nil {
			return params, fmt.Errorf("messages[%d]: %w", i, err)
		}
		params.Messages = append(params.Messages, m)
	}
	for i, t := range req.Tools {
		def := shared.FunctionDefinitionParam{Name: t.Name}
		if t.Description != "" {
			def.Description = param.NewOpt(t.Description)
		}
		if t.Strict {
			def.Strict = param.NewOpt(true)
		}
		if len(t.Parameters) > 0 {
			if err := json.Unmarshal(t.Parameters, &def.Parameters); err != nil {
				return params, fmt.Errorf("tools[%d] %q: parameters: %w", i, t.Name, err)
			}
		}
		params.Tools = append(params.Tools, sdk.ChatCompletionFunctionTool(def))
	}
	if len(req.Tools) > 0 {
		params.ParallelToolCalls = param.NewOpt(true)
	}
	if rf := req.ResponseFormat; rf != nil {
		if !json.Valid(rf.Schema) {
			return params, fmt.Errorf("response format %q: schema is not valid JSON", rf.Name)
		}
		params.ResponseFormat = sdk.ChatCompletionNewParamsResponseFormatUnion{
			OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
				JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{
					Name:   rf.Name,
					Schema: rf.Schema,
					Strict: param.NewOpt(true),
				},
			},
		}
	}
	if req.Params.Temperature != nil {
		params.Temperature = param.NewOpt(*req.Params.Temperature)
	}
	if req.Params.Seed != nil {
		params.Seed = param.NewOpt(*req.Params.Seed)
	}
	if n := req.Params.MaxTokens; n > 0 {
		// OpenAI's reasoning models accept only max_completion_tokens; many
		// compatible servers know only max_tokens.
		if openAI {
			params.MaxCompletionTokens = param.NewOpt(int64(n))
		} else {
			params.MaxTokens = param.NewOpt(int64(n))
		}
	}
	return params, nil
}

func sdkMessage(m *baton.Message) (sdk.ChatCompletionMessageParamUnion, error) {
	name := speakerName(m.Name)
	switch m.Role {
	case baton.RoleSystem:
		p := &sdk.ChatCompletionSystemMessageParam{}
		p.Content.OfString = param.NewOpt(m.Content)
		if name != "" {
			p.Name = param.NewOpt(name)
		}
		return sdk.ChatCompletionMessageParamUnion{OfSystem: p}, nil
	case baton.RoleUser:
		p := &sdk.ChatCompletionUserMessageParam{}
		p.Content.OfString = param.NewOpt(m.Content)
		if name != "" {
			p.Name = param.NewOpt(name)
		}
		return sdk.ChatCompletionMessageParamUnion{OfUser: p}, nil
	case baton.RoleAssistant:
		p := &sdk.ChatCompletionAssistantMessageParam{}
		if m.Content != "" || len(m.ToolCalls) == 0 {
			p.Content.OfString = param.NewOpt(m.Content)
		}
		if name != "" {
			p.Name = param.NewOpt(name)
		}
		for _, tc := range m.ToolCalls {
			args := tc.Arguments
			if args == "" {
				args = "{}"
			}
			p.ToolCalls = append(p.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
					ID:       tc.ID,
					Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: args},
				},
			})
		}
		return sdk.ChatCompletionMessageParamUnion{OfAssistant: p}, nil
	case baton.RoleTool:
		if m.ToolCallID == "" {
			return sdk.ChatCompletionMessageParamUnion{}, errors.New("tool message without tool_call_id")
		}
		p := &sdk.ChatCompletionToolMessageParam{ToolCallID: m.ToolCallID}
		p.Content.OfString = param.NewOpt(m.Content)
		return sdk.ChatCompletionMessageParamUnion{OfTool: p}, nil
	}
	return sdk.ChatCompletionMessageParamUnion{}, fmt.Errorf("unknown role %q", m.Role)
}
