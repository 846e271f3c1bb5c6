package tool

import (
	"fmt"
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
// them and maxClientSchemaCombinators combinator keywords. The error names
// the keyword and where it is, as a JSON pointer.
func checkPlainSchema(doc any) error {
	w := plainWalk{}
	return w.walk(doc, "", 1)
}

type plainWalk struct {
	nodes, combinators int
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
	for _, k := range sortedKeys(obj) {
		if combinatorKeywords[k] {
			w.combinators++
			if w.combinators > maxClientSchemaCombinators {
				return fmt.Errorf("at %s: %q: more than %d combinator keywords (allOf, anyOf, oneOf, not, if, then, else, dependentSchemas)", pointer(at+"/"+k), k, maxClientSchemaCombinators)
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
