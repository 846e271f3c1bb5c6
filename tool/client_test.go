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

// alternatives is a pattern of n alternatives `.*i#`, about 5n bytes: Go's
// regexp runs every one of them along the whole string.
func alternatives(n int) string {
	alts := make([]string, n)
	for i := range alts {
		alts[i] = fmt.Sprintf(".*%d#", i)
	}
	return "(" + strings.Join(alts, "|") + ")"
}

// TestCheckClientTools_BoundsPatterns: a pattern or patternProperties key
// over maxClientPatternBytes, patterns over maxClientPatternTotalBytes or
// maxClientPatternTotalInsts together are refused when offered, naming
// tools[i].parameters and the pointer; ordinary patterns are accepted.
func TestCheckClientTools_BoundsPatterns(t *testing.T) {
	str := func(re string) string {
		b, _ := json.Marshal(re)
		return fmt.Sprintf(`{"type":"string","pattern":%s}`, b)
	}
	props := func(n int, re string) json.RawMessage {
		p := make([]string, n)
		for i := range p {
			p[i] = fmt.Sprintf(`"p%d":%s`, i, str(re))
		}
		return json.RawMessage(`{"type":"object","properties":{` + strings.Join(p, ",") + `}}`)
	}
	long := alternatives(60)  // ~300 bytes
	short := alternatives(40) // ~200 bytes, ~200 instructions
	if len(long) <= maxClientPatternBytes || len(short) > maxClientPatternBytes {
		t.Fatalf("patterns of %d and %d bytes", len(long), len(short))
	}
	keyed, _ := json.Marshal(map[string]any{"type": "object", "patternProperties": map[string]any{long: map[string]any{}}})
	for _, tc := range []struct {
		name   string
		params json.RawMessage
		want   string
	}{
		{"the brief's", props(1, alternatives(2000)), "at /properties/p0/pattern: the pattern is longer than 256 bytes"},
		{"long pattern", props(1, long), "at /properties/p0/pattern: the pattern is longer than 256 bytes"},
		{"long key", keyed, "at /patternProperties/" + long[:32] + "…: the pattern is longer than 256 bytes"},
		{"too many bytes", props(12, strings.Repeat(`[[:alpha:]]`, 20)), "at /properties/p7/pattern: the patterns are longer than 2048 bytes together"},
		{"too many instructions", props(6, short), "at /properties/p4/pattern: the patterns compile to more than 1024 instructions together"},
		{"repeat count", props(1, `^(ab){600}$`), "at /properties/p0/pattern: the patterns compile to more than 1024 instructions"},
		{"nested", json.RawMessage(`{"type":"object","properties":{"a":{"type":"array","items":` + str(`x{600}`) + `},"b":{"propertyNames":` + str(`y{600}`) + `}}}`), "at /properties/b/propertyNames/pattern: the patterns compile to more than 1024"},
	} {
		err := CheckClientTools([]baton.ClientTool{{Name: "slow", Parameters: tc.params}})
		if baton.ErrorCode(err) != baton.EINVALID || !strings.Contains(err.Error(), "tools[0].parameters: not a plain JSON Schema: "+tc.want) {
			t.Errorf("%s: CheckClientTools = %v, want EINVALID naming tools[0].parameters and %q", tc.name, err, tc.want)
		}
	}

	ok := props(4, short)
	for _, p := range []json.RawMessage{ok, props(1, `^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`), props(2, `^.{1,200}$`)} {
		if err := CheckClientTools([]baton.ClientTool{{Name: "ok", Parameters: p}}); err != nil {
			t.Errorf("CheckClientTools(%.80s…) = %v", p, err)
		}
	}
	if msg := CheckClientArgs(baton.ClientTool{Name: "ok", Parameters: ok}, json.RawMessage(`{"p0":"a12#","p1":"nope"}`)); !strings.Contains(msg, "/p1") || strings.Contains(msg, "/p0") {
		t.Errorf("CheckClientArgs = %q, want a problem at /p1 only", msg)
	}
}

// TestCheckClientArgs_BoundsAndOnce: arguments over MaxClientArgsBytes are
// an error unchecked, and arguments that fail are validated once however
// often the engine asks.
func TestCheckClientArgs_BoundsAndOnce(t *testing.T) {
	ct := baton.ClientTool{Name: "b", Parameters: json.RawMessage(`{"type":"object","properties":{"s":{"type":"string","pattern":"^a+$"}}}`)}
	validated := func() int {
		clientFailures.mu.Lock()
		defer clientFailures.mu.Unlock()
		return clientFailures.validated
	}
	big, _ := json.Marshal(map[string]string{"s": strings.Repeat("a", MaxClientArgsBytes)})
	before := validated()
	if msg := CheckClientArgs(ct, big); !strings.Contains(msg, "larger than 65536 bytes") {
		t.Errorf("CheckClientArgs(%d bytes) = %q, want refused for its size", len(big), msg)
	}
	if n := validated() - before; n != 0 {
		t.Errorf("arguments over the bound validated %d times", n)
	}
	fits, _ := json.Marshal(map[string]string{"s": strings.Repeat("a", MaxClientArgsBytes-16)})
	if msg := CheckClientArgs(ct, fits); msg != "" {
		t.Errorf("CheckClientArgs(%d bytes) = %q", len(fits), msg)
	}

	bad := json.RawMessage(`{"s":"b"}`)
	before = validated()
	for range 3 {
		if msg := CheckClientArgs(ct, bad); !strings.Contains(msg, "at /s") {
			t.Fatalf("CheckClientArgs = %q, want a problem at /s", msg)
		}
	}
	if n := validated() - before; n != 1 {
		t.Errorf("failing arguments validated %d times, want once", n)
	}
	// The same arguments for another schema are checked against it.
	other := baton.ClientTool{Name: "b", Parameters: json.RawMessage(`{"type":"object","properties":{"s":{"type":"string","pattern":"^b+$"}}}`)}
	if msg := CheckClientArgs(other, bad); msg != "" {
		t.Errorf("CheckClientArgs(other schema) = %q", msg)
	}
}
