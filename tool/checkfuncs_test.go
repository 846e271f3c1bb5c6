package tool_test

import (
	"context"
	"strings"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/tool"
)

// TestCheckFuncsNamesEveryUnboundGoTool: CheckFuncs reports each go tool
// whose function is not registered, by place, name and function, and lets
// the other kinds be.
func TestCheckFuncsNamesEveryUnboundGoTool(t *testing.T) {
	lookup := tool.MustFunc("lookup_word", "Look a word up.", func(context.Context, *baton.CallContext, struct{}) (string, error) {
		return "", nil
	})
	specs := []tool.Spec{
		{Agent: "A", Name: "lookup", Function: "lookup_word", Kind: tool.KindGo},
		{Agent: "A", Name: "define", Function: "lookupword", Kind: tool.KindGo},
		{Agent: "A", Name: "shell", File: "shell", Kind: tool.KindCommand},
		{Agent: "A", Name: "fetch", Kind: tool.KindGo},
	}
	err := tool.CheckFuncs(specs, tool.WithFuncs(lookup))
	if err == nil {
		t.Fatal("CheckFuncs accepted go tools whose functions are not registered")
	}
	for _, want := range []string{
		`tools[1] (define): go function "lookupword" is not registered (register it with tool.WithFuncs; did you mean "lookup_word"?)`,
		`tools[3] (fetch): go function "fetch" is not registered (register it with tool.WithFuncs)`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\nwant it to say %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "tools[0]") || strings.Contains(err.Error(), "shell") {
		t.Errorf("error %q names a tool that is bound", err)
	}
	if baton.ErrorCode(err) != baton.EINVALID {
		t.Errorf("code %s, want %s", baton.ErrorCode(err), baton.EINVALID)
	}
	if err := tool.CheckFuncs(specs[:1], tool.WithFuncs(lookup)); err != nil {
		t.Fatalf("a bound go tool: %v", err)
	}
}
