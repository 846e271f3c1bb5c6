package tool

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/batonhq/baton"
	"github.com/google/jsonschema-go/jsonschema"
)

// Func makes a Go tool of fn. The parameter schema is derived from In, which
// must be a struct, by github.com/google/jsonschema-go: exported fields by
// their json names, fields without omitempty required, a `jsonschema:"…"`
// tag as the field's description.
//
// fn gets the call context (CallContext.EffectKey to de-duplicate side
// effects, Vars to read and update context variables) and the decoded
// arguments. Its result becomes the content: a string as is, a
// baton.ToolResult as the whole result, anything else as JSON. An error from
// fn is a tool error whose content is the error's text. fn must return when
// ctx is done (the call's timeout).
//
// Register the tool with WithFuncs; tools.json entries of kind go name it by
// "function".
func Func[In, Out any](name, description string, fn func(ctx context.Context, cc *baton.CallContext, in In) (Out, error)) (baton.Tool, error) {
	s, err := jsonschema.For[In](nil)
	if err != nil {
		return nil, fmt.Errorf("go tool %s: schema of the arguments: %w", name, err)
	}
	if s.Type != "object" {
		return nil, fmt.Errorf("go tool %s: arguments must be a struct, not %q", name, s.Type)
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("go tool %s: encode schema: %w", name, err)
	}
	return &goTool[In, Out]{name: name, desc: description, params: raw, fn: fn}, nil
}

// MustFunc is Func for tools defined at init time; it panics on error.
func MustFunc[In, Out any](name, description string, fn func(ctx context.Context, cc *baton.CallContext, in In) (Out, error)) baton.Tool {
	t, err := Func(name, description, fn)
	if err != nil {
		panic(err)
	}
	return t
}

type goTool[In, Out any] struct {
	name, desc string
	params     json.RawMessage
	fn         func(context.Context, *baton.CallContext, In) (Out, error)
}

func (t *goTool[In, Out]) Name() string                { return t.name }
func (t *goTool[In, Out]) Description() string         { return t.desc }
func (t *goTool[In, Out]) Parameters() json.RawMessage { return t.params }

func (t *goTool[In, Out]) Call(ctx context.Context, cc *baton.CallContext, args json.RawMessage) (baton.ToolResult, error) {
	var in In
	if err := json.Unmarshal(args, &in); err != nil {
		return errorResult("invalid arguments for tool %s: %v", t.name, err), nil
	}
	out, err := t.fn(ctx, cc, in)
	if err != nil {
		return errorResult("%v", err), nil
	}
	switch v := any(out).(type) {
	case string:
		return baton.ToolResult{Status: baton.ToolStatusOK, Content: v}, nil
	case baton.ToolResult:
		return v, nil
	case json.RawMessage:
		return baton.ToolResult{Status: baton.ToolStatusOK, Content: string(v)}, nil
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return errorResult("tool %s: encode result: %v", t.name, err), nil
	}
	return baton.ToolResult{Status: baton.ToolStatusOK, Content: string(raw)}, nil
}
