package tool

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/batonhq/baton"
)

// bombSchema is a schema whose validation costs 2^depth: each definition
// refers twice to the one before it.
func bombSchema(depth int) json.RawMessage {
	var b strings.Builder
	b.WriteString(`{"type":"object","$defs":{"d0":{"required":["x"]}`)
	for i := 1; i <= depth; i++ {
		fmt.Fprintf(&b, `,"d%d":{"anyOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]}`, i, i-1, i-1)
	}
	fmt.Fprintf(&b, `},"$ref":"#/$defs/d%d"}`, depth)
	return json.RawMessage(b.String())
}

// nested is a schema of objects holding a string depth subschemas deep
// (the root and the string count).
func nested(depth int) json.RawMessage {
	s := `{"type":"object","properties":{"leaf":{"type":"string"}},"required":["leaf"]}`
	for i := 2; i < depth; i++ {
		s = fmt.Sprintf(`{"type":"object","properties":{"in":%s}}`, s)
	}
	return json.RawMessage(s)
}

// TestCheckClientTools_RefusesSchemaBombs: a client's tool whose parameters
// refer to other schemas, nest too deep, or hold too many subschemas or
// combinators is refused at once, with an error naming the field and the
// keyword; a plain nested schema is accepted and still checks arguments.
func TestCheckClientTools_RefusesSchemaBombs(t *testing.T) {
	many := func(n int, sub string) json.RawMessage {
		props := make([]string, n)
		for i := range props {
			props[i] = fmt.Sprintf(`"p%d":%s`, i, sub)
		}
		return json.RawMessage(`{"type":"object","properties":{` + strings.Join(props, ",") + `}}`)
	}
	anyOfs := make([]string, maxClientSchemaCombinators+1)
	for i := range anyOfs {
		anyOfs[i] = fmt.Sprintf(`"p%d":{"anyOf":[{"type":"string"}]}`, i)
	}
	for _, tc := range []struct {
		name   string
		params json.RawMessage
		want   string
	}{
		{"bomb", bombSchema(40), `tools[0].parameters: not a plain JSON Schema: at /: "$ref" is not allowed`},
		{"defs", json.RawMessage(`{"type":"object","$defs":{"a":{}}}`), `at /: "$defs" is not allowed`},
		{"definitions", json.RawMessage(`{"type":"object","properties":{"a":{"definitions":{}}}}`), `at /properties/a: "definitions" is not allowed`},
		{"dynamicRef", json.RawMessage(`{"type":"object","properties":{"a":{"items":{"$dynamicRef":"#x"}}}}`), `at /properties/a/items: "$dynamicRef" is not allowed`},
		{"recursiveRef", json.RawMessage(`{"type":"object","anyOf":[{},{"$recursiveRef":"#"}]}`), `at /anyOf/1: "$recursiveRef" is not allowed`},
		{"ref in not", json.RawMessage(`{"type":"object","not":{"$ref":"#"}}`), `at /not: "$ref" is not allowed`},
		{"too deep", nested(maxClientSchemaDepth + 1), fmt.Sprintf("nested more than %d deep", maxClientSchemaDepth)},
		{"too many", many(maxClientSchemaNodes, `{}`), fmt.Sprintf("more than %d subschemas", maxClientSchemaNodes)},
		{"too many combinators", json.RawMessage(`{"type":"object","properties":{` + strings.Join(anyOfs, ",") + `}}`), `"anyOf": more than 64 combinator keywords`},
	} {
		ct := baton.ClientTool{Name: "bomb", Parameters: tc.params}
		err := CheckClientTools([]baton.ClientTool{ct})
		if baton.ErrorCode(err) != baton.EINVALID || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "tools[0].parameters") {
			t.Errorf("%s: CheckClientTools = %v, want EINVALID naming tools[0].parameters and %q", tc.name, err, tc.want)
		}
	}

	// A set recorded before the check was as strict is not validated
	// against: the call gets the error, at once.
	if msg := CheckClientArgs(baton.ClientTool{Name: "bomb", Parameters: bombSchema(12)}, json.RawMessage(`{}`)); !strings.Contains(msg, `not a plain JSON Schema: at /: "$ref" is not allowed`) {
		t.Errorf("CheckClientArgs(bomb) = %q, want the schema refused", msg)
	}

	// Plain schemas, at the bounds, are accepted; "$ref" as a property's
	// name or inside a value is not a reference.
	plain := json.RawMessage(`{"type":"object","properties":{
		"$ref":{"type":"string","enum":["#/$defs/x"]},
		"where":{"type":"object","properties":{"city":{"type":"string"},"at":{"type":"array","items":{"type":"number"},"minItems":2}},"required":["city"]},
		"how":{"oneOf":[{"const":"car"},{"const":"foot"}],"default":{"$ref":"#"}}},
		"required":["where"]}`)
	for _, p := range []json.RawMessage{plain, nested(maxClientSchemaDepth), many(maxClientSchemaNodes-1, `{}`)} {
		if err := CheckClientTools([]baton.ClientTool{{Name: "ok", Parameters: p}}); err != nil {
			t.Errorf("CheckClientTools(%.80s…) = %v", p, err)
		}
	}
	ct := baton.ClientTool{Name: "ok", Parameters: plain}
	if msg := CheckClientArgs(ct, json.RawMessage(`{"where":{"city":"Oslo","at":[59.9,10.7]},"how":"foot"}`)); msg != "" {
		t.Errorf("valid arguments refused: %s", msg)
	}
	if msg := CheckClientArgs(ct, json.RawMessage(`{"where":{"at":[1]},"how":"bus"}`)); !strings.Contains(msg, "/where") || !strings.Contains(msg, "/how") {
		t.Errorf("invalid arguments: %q, want the problems at /where and /how", msg)
	}
	if msg := CheckClientArgs(baton.ClientTool{Name: "deep", Parameters: nested(maxClientSchemaDepth)}, json.RawMessage(`{}`)); msg != "" {
		t.Errorf("nested schema: %q", msg)
	}
}

// TestCheckClientArgs_CompilesOnce: a schema is compiled once, however many
// calls check arguments against it.
func TestCheckClientArgs_CompilesOnce(t *testing.T) {
	ct := baton.ClientTool{Name: "once", Parameters: json.RawMessage(`{"type":"object","properties":{"once":{"type":"integer"}}}`)}
	count := func() int {
		clientSchemas.mu.Lock()
		defer clientSchemas.mu.Unlock()
		return clientSchemas.compiled
	}
	if err := CheckClientTools([]baton.ClientTool{ct}); err != nil {
		t.Fatal(err)
	}
	before := count()
	for range 3 {
		if msg := CheckClientArgs(ct, json.RawMessage(`{"once":"x"}`)); !strings.Contains(msg, "/once") {
			t.Fatalf("CheckClientArgs = %q, want a problem at /once", msg)
		}
	}
	if n := count() - before; n != 0 {
		t.Errorf("compiled %d more times after the check", n)
	}
}
