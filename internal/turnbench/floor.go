package turnbench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"
)

// Floor is the turn written by hand with openai-go and nothing else: no
// store, no bus, no engine. The person's message, a streamed call that
// asks for the echo tool, the tool run in place, a second streamed call
// with its result, the reply's words consumed as they arrive. What baton
// costs beyond it is the price of durability, routing and streaming to
// clients.
type Floor struct {
	client sdk.Client
	model  string
	tools  []sdk.ChatCompletionToolUnionParam
}

// NewFloor returns the hand-written loop against an OpenAI-compatible
// endpoint. Its HTTP transport keeps an idle connection for each of
// concurrency calls in flight, as a hand-tuned client would: the floor is
// the least a turn can cost.
func NewFloor(baseURL, apiKey, model string, concurrency int) *Floor {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = max(concurrency, 2)
	return &Floor{
		client: sdk.NewClient(option.WithBaseURL(baseURL), option.WithAPIKey(apiKey),
			option.WithHTTPClient(&http.Client{Transport: tr}), option.WithMaxRetries(0)),
		model: model,
		tools: []sdk.ChatCompletionToolUnionParam{sdk.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name:        "echo",
			Description: param.NewOpt(EchoDescription),
			Parameters:  shared.FunctionParameters{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}, "required": []string{"text"}},
		})},
	}
}

// Name is "floor".
func (f *Floor) Name() string { return "floor" }

// maxRounds bounds the model calls of one floor turn against a real model
// that keeps calling tools.
const maxRounds = 4

// Turn runs one turn in a new conversation.
func (f *Floor) Turn(ctx context.Context) (Timing, error) {
	t0 := time.Now()
	var tm Timing
	messages := []sdk.ChatCompletionMessageParamUnion{
		sdk.SystemMessage(SystemMessage),
		sdk.UserMessage(UserMessage),
	}
	for range maxRounds {
		stream := f.client.Chat.Completions.NewStreaming(ctx, sdk.ChatCompletionNewParams{
			Model:         shared.ChatModel(f.model),
			Messages:      messages,
			Tools:         f.tools,
			StreamOptions: sdk.ChatCompletionStreamOptionsParam{IncludeUsage: param.NewOpt(true)},
		})
		var acc sdk.ChatCompletionAccumulator
		for stream.Next() {
			c := stream.Current()
			acc.AddChunk(c)
			if tm.FirstToken == 0 && len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
				tm.FirstToken = time.Since(t0)
			}
		}
		err := stream.Err()
		_ = stream.Close()
		if err != nil {
			return tm, fmt.Errorf("floor: model call: %w", err)
		}
		if len(acc.Choices) == 0 {
			return tm, errors.New("floor: the model answered no choice")
		}
		msg := acc.Choices[0].Message
		if len(msg.ToolCalls) == 0 {
			tm.Total = time.Since(t0)
			return tm, nil
		}
		messages = append(messages, msg.ToParam())
		for _, tc := range msg.ToolCalls {
			out, err := echo(tc.Function.Name, tc.Function.Arguments)
			if err != nil {
				out = "error: " + err.Error()
			}
			messages = append(messages, sdk.ToolMessage(out, tc.ID))
		}
	}
	return tm, fmt.Errorf("floor: no reply after %d model calls", maxRounds)
}

// Close does nothing: the floor holds nothing.
func (f *Floor) Close(context.Context) error { return nil }

// echo runs the tool the floor's model calls.
func echo(name, args string) (string, error) {
	if name != "echo" {
		return "", fmt.Errorf("unknown tool %q", name)
	}
	var in EchoInput
	if err := json.Unmarshal([]byte(args), &in); err != nil {
		return "", fmt.Errorf("echo: arguments: %w", err)
	}
	return in.Text, nil
}
