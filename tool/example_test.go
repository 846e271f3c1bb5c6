package tool_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/tool"
)

// A Go tool: the schema comes from the argument struct, the result is the
// content, and the registry runs it for the agent that tools.json names.
func ExampleFunc() {
	type weatherArgs struct {
		City string `json:"city" jsonschema:"the city to look up"`
	}
	weather := tool.MustFunc("weather", "Current weather in a city.",
		func(ctx context.Context, cc *baton.CallContext, in weatherArgs) (string, error) {
			return "sunny in " + in.City, nil
		})

	reg, err := tool.New("testdata/wf", []tool.Spec{{Agent: "Assistant", Function: "weather"}}, tool.WithFuncs(weather))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer reg.Close()

	t, _ := reg.Tool(context.Background(), "Assistant", "weather")
	cc := &baton.CallContext{ChatID: "c1", Agent: "Assistant", TurnKey: "t1", ToolCallID: "call_1"}
	res, _ := t.Call(context.Background(), cc, json.RawMessage(`{"city": "Lyon"}`))
	fmt.Println(res.Status, res.Content)
	res, _ = t.Call(context.Background(), cc, json.RawMessage(`{}`))
	fmt.Println(res.Status, res.Content)
	// Output:
	// ok sunny in Lyon
	// error invalid arguments for tool weather: at /: missing property 'city'
}
