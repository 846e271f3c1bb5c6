package tool

import (
	"fmt"
	"regexp/syntax"
	"sort"
)

// The bounds of a client tool's parameters (checkPlainSchema). Validating
// arguments against a schema with no references visits each subschema at
// most once per value of the arguments, so these keep the work of a call's
// check small and linear in the arguments' size.
const (
	maxClientSchemaDepth       = 16  // subschemas nested in one another
	maxClientSchemaNodes       = 512 // subschemas in all, the root included
	maxClientSchemaCombinators = 64  // anyOf, oneOf, allOf, not, if, then, else, dependentSchemas, …

	// Go's regexp matches in time about the compiled program's size times
	// the string's length: a few kilobytes of alternatives made an 8 KB
	// argument take a third of a second. So each pattern (a "pattern" or
	// a "patternProperties" key) is short, and a tool's patterns are few
	// bytes and few instructions together: a repeat count such as .{1000}
	// makes a short pattern a large program.
	maxClientPatternBytes      = 256
	maxClientPatternTotalBytes = 2 << 10
	maxClientPatternTotalInsts = 1024
)

// refKeywords are the keywords by which a schema refers to another part of
// itself. A client's tool may use none: a chain of references that each
// branch in two costs 2^n to validate in a few hundred bytes, on the chat's
// run goroutine, where run.cancel cannot stop it.
var refKeywords = []string{"$ref", "$dynamicRef", "$recursiveRef", "$defs", "definitions"}

// Where subschemas sit, by keyword: one schema, an array of them, or an
// object whose values are schemas. "items" and "dependencies" may be either
// (older drafts); the walk looks at the value.
var (
	oneSchemaKeywords = []string{
		"not", "if", "then", "else", "additionalProperties", "additionalItems",
		"unevaluatedItems", "unevaluatedProperties", "contains", "propertyNames", "contentSchema", "items",
	}
	schemaArrayKeywords = []string{"allOf", "anyOf", "oneOf", "prefixItems", "items"}
	schemaMapKeywords   = []string{"properties", "patternProperties", "dependentSchemas", "dependencies"}
	combinatorKeywords  = map[string]bool{
		"allOf": true, "anyOf": true, "oneOf": true, "not": true, "if": true, "then": true, "else": true,
		"dependentSchemas": true, "dependencies": true,
	}
)

// checkPlainSchema checks that doc, a decoded JSON Schema a client offers,
// is plain: no reference keyword anywhere a subschema may be, subschemas
// nested at most maxClientSchemaDepth deep, at most maxClientSchemaNodes of
// them and maxClientSchemaCombinators combinator keywords, and patterns
// within the maxClientPattern bounds. The error names the keyword and
// where it is, as a JSON pointer.
func checkPlainSchema(doc any) error {
	w := plainWalk{}
	return w.walk(doc, "", 1)
}

type plainWalk struct {
	nodes, combinators         int
	patternBytes, patternInsts int
}

// pattern counts re, a regular expression at the pointer at, against the
// bounds on patterns. One that does not compile is left to the schema's
// compiler, which says why.
func (w *plainWalk) pattern(re, at string) error {
	if len(re) > maxClientPatternBytes {
		return fmt.Errorf("at %s: the pattern is longer than %d bytes", pointer(at), maxClientPatternBytes)
	}
	w.patternBytes += len(re)
	if w.patternBytes > maxClientPatternTotalBytes {
		return fmt.Errorf("at %s: the patterns are longer than %d bytes together", pointer(at), maxClientPatternTotalBytes)
	}
	parsed, err := syntax.Parse(re, syntax.Perl) // as regexp.Compile
	if err != nil {
		return nil
	}
	prog, err := syntax.Compile(parsed.Simplify())
	if err != nil {
		return nil
	}
	w.patternInsts += len(prog.Inst)
	if w.patternInsts > maxClientPatternTotalInsts {
		return fmt.Errorf("at %s: the patterns compile to more than %d instructions together (a repeat count such as {100} copies what it repeats)", pointer(at), maxClientPatternTotalInsts)
	}
	return nil
}

func (w *plainWalk) walk(v any, at string, depth int) error {
	w.nodes++
	if w.nodes > maxClientSchemaNodes {
		return fmt.Errorf("more than %d subschemas", maxClientSchemaNodes)
	}
	if depth > maxClientSchemaDepth {
		return fmt.Errorf("at %s: subschemas nested more than %d deep", pointer(at), maxClientSchemaDepth)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil // true, false, or not a schema (the compiler says so)
	}
	for _, k := range refKeywords {
		if _, ok := obj[k]; ok {
			return fmt.Errorf("at %s: %q is not allowed: a client tool's schema may not refer to other schemas", pointer(at), k)
		}
	}
	if re, ok := obj["pattern"].(string); ok {
		if err := w.pattern(re, at+"/pattern"); err != nil {
			return err
		}
	}
	if m, ok := obj["patternProperties"].(map[string]any); ok {
		for _, re := range sortedKeys(m) {
			key := re
			if len(key) > maxClientPatternBytes {
				key = key[:32] + "…" // the error names it, not all of it
			}
			if err := w.pattern(re, at+"/patternProperties/"+escapePointer(key)); err != nil {
				return err
			}
		}
	}
	for _, k := range sortedKeys(obj) {
		if combinatorKeywords[k] {
			w.combinators++
			if w.combinators > maxClientSchemaCombinators {
				return fmt.Errorf("at %s: %q: more than %d combinator keywords (allOf, anyOf, oneOf, not, if, then, else, dependentSchemas, dependencies)", pointer(at+"/"+k), k, maxClientSchemaCombinators)
			}
		}
	}
	for _, k := range oneSchemaKeywords {
		if sub, ok := obj[k]; ok {
			if _, isArray := sub.([]any); isArray {
				continue // "items" as an array: below
			}
			if err := w.walk(sub, at+"/"+escapePointer(k), depth+1); err != nil {
				return err
			}
		}
	}
	for _, k := range schemaArrayKeywords {
		if arr, ok := obj[k].([]any); ok {
			for i, sub := range arr {
				if err := w.walk(sub, fmt.Sprintf("%s/%s/%d", at, escapePointer(k), i), depth+1); err != nil {
					return err
				}
			}
		}
	}
	for _, k := range schemaMapKeywords {
		m, ok := obj[k].(map[string]any)
		if !ok {
			continue
		}
		for _, name := range sortedKeys(m) {
			if _, isArray := m[name].([]any); isArray {
				continue // "dependencies" naming required properties
			}
			if err := w.walk(m[name], at+"/"+escapePointer(k)+"/"+escapePointer(name), depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// sortedKeys returns m's keys in order, so that the error for a schema is
// the same every time.
func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func pointer(at string) string {
	if at == "" {
		return "/"
	}
	return at
}

// escapePointer escapes a key for a JSON pointer (RFC 6901).
func escapePointer(k string) string {
	out := make([]byte, 0, len(k))
	for i := 0; i < len(k); i++ {
		switch k[i] {
		case '~':
			out = append(out, '~', '0')
		case '/':
			out = append(out, '~', '1')
		default:
			out = append(out, k[i])
		}
	}
	return string(out)
}
