package workflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/batonhq/baton"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Model is a structured-output model of structured_outputs.json, compiled
// at load to a JSON Schema (draft 2020-12) in the strict form that OpenAI's
// response_format json_schema accepts: every object lists all its
// properties in required and sets additionalProperties to false, and an
// optional field is required but nullable. Nested models are $defs.
type Model struct {
	// Name is the model's key in models.
	Name string `json:"-"`
	// Type must be "model".
	Type        string            `json:"type,omitempty"`
	Description string            `json:"description,omitempty"`
	Fields      map[string]*Field `json:"fields,omitempty"`
	// FieldOrder lists the field names in file order.
	FieldOrder []string `json:"-"`

	schema     []byte
	strict     bool
	once       sync.Once
	validator  *jsonschema.Schema
	compileErr error
	types      map[string]*fieldType // parsed field types, by field name
}

// Field is one field of a model.
type Field struct {
	// Type is str, int, float, bool, dict, list[T], optional[T],
	// Literal["a", "b"], enum (with Values) or the name of another model.
	Type        string `json:"type,omitempty"`
	Description string `json:"description,omitempty"`
	// Values are the allowed values of an enum field.
	Values []any `json:"values,omitempty"`
	// Optional makes the field nullable, like optional[T].
	Optional bool `json:"optional,omitempty"`
}

// Schema returns the model's compiled JSON Schema (draft 2020-12), for a
// strict response_format and for clients. The caller must not modify it.
func (m *Model) Schema() []byte { return m.schema }

// Strict reports whether the schema satisfies OpenAI's strict mode. It does
// unless the model (or a model it uses) has a dict field, whose keys cannot
// be listed.
func (m *Model) Strict() bool { return m.strict }

// Validate checks a decoded JSON value (as produced by encoding/json into
// an any, or by jsonschema.UnmarshalJSON) against the model. The error is an
// EINVALID *baton.Error naming every wrong field, e.g.
// "ActionPlanOutput.agent_message: missing" or
// "ActionPlanOutput.ActionPlan.workflow.name: got number, want string".
func (m *Model) Validate(v any) error {
	if err := m.compile(); err != nil {
		return baton.Errorf(baton.EINTERNAL, "%v", err)
	}
	err := m.validator.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return baton.Errorf(baton.EINVALID, "%s: %v", m.Name, err)
	}
	var msgs []string
	collectValidation(m.Name, ve, &msgs)
	return baton.Errorf(baton.EINVALID, "%s", strings.Join(msgs, "; "))
}

// ValidateJSON decodes data and validates it; it returns the decoded value
// (numbers as json.Number) when it is valid.
func (m *Model) ValidateJSON(data []byte) (any, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, baton.Errorf(baton.EINVALID, "%s: output is not valid JSON: %v", m.Name, err)
	}
	if err := m.Validate(v); err != nil {
		return nil, err
	}
	return v, nil
}

var printer = message.NewPrinter(language.English)

func collectValidation(model string, e *jsonschema.ValidationError, out *[]string) {
	if len(e.Causes) == 0 {
		loc := model
		for _, p := range e.InstanceLocation {
			if _, err := strconv.Atoi(p); err == nil {
				loc += "[" + p + "]"
			} else {
				loc += "." + p
			}
		}
		msg := e.ErrorKind.LocalizedString(printer)
		// A missing property is reported at the object; name the field.
		if strings.HasPrefix(msg, "missing propert") {
			if props := quoted(msg); len(props) > 0 {
				for _, p := range props {
					*out = append(*out, loc+"."+p+": missing")
				}
				return
			}
		}
		*out = append(*out, loc+": "+msg)
		return
	}
	for _, c := range e.Causes {
		collectValidation(model, c, out)
	}
}

// quoted returns the 'single-quoted' words of s.
func quoted(s string) []string {
	var out []string
	for {
		i := strings.IndexByte(s, '\'')
		if i < 0 {
			return out
		}
		j := strings.IndexByte(s[i+1:], '\'')
		if j < 0 {
			return out
		}
		out = append(out, s[i+1:i+1+j])
		s = s[i+j+2:]
	}
}

// fieldType is a parsed field type.
type fieldType struct {
	kind     string // str int float bool dict list optional enum model
	elem     *fieldType
	values   []any
	model    string
	nullable bool
}

// parseFieldType parses the type grammar of a field.
func parseFieldType(s string, values []any) (*fieldType, error) {
	s = strings.TrimSpace(s)
	if open := strings.IndexByte(s, '['); open > 0 && strings.HasSuffix(s, "]") {
		head, inner := s[:open], s[open+1:len(s)-1]
		switch head {
		case "list", "List":
			elem, err := parseFieldType(inner, nil)
			if err != nil {
				return nil, err
			}
			return &fieldType{kind: "list", elem: elem}, nil
		case "optional", "Optional":
			elem, err := parseFieldType(inner, values)
			if err != nil {
				return nil, err
			}
			elem.nullable = true
			return elem, nil
		case "Literal", "literal":
			vals, err := parseLiterals(inner)
			if err != nil {
				return nil, err
			}
			return &fieldType{kind: "enum", values: vals}, nil
		}
		return nil, fmt.Errorf("unknown type %q (use list[T], optional[T] or Literal[...])", s)
	}
	switch s {
	case "str", "string":
		return &fieldType{kind: "str"}, nil
	case "int", "integer":
		return &fieldType{kind: "int"}, nil
	case "float", "number":
		return &fieldType{kind: "float"}, nil
	case "bool", "boolean":
		return &fieldType{kind: "bool"}, nil
	case "dict", "object":
		return &fieldType{kind: "dict"}, nil
	case "enum":
		if len(values) == 0 {
			return nil, errors.New("enum needs values")
		}
		return &fieldType{kind: "enum", values: values}, nil
	case "":
		return nil, errors.New("required")
	}
	if !identRe.MatchString(s) {
		return nil, fmt.Errorf("unknown type %q", s)
	}
	return &fieldType{kind: "model", model: s}, nil
}

// parseLiterals parses the inside of Literal[...]: JSON or single-quoted
// strings, numbers, True, False and None, separated by commas.
func parseLiterals(s string) ([]any, error) {
	var out []any
	for s = strings.TrimSpace(s); s != ""; {
		var lit string
		switch s[0] {
		case '\'', '"':
			j := strings.IndexByte(s[1:], s[0])
			if j < 0 {
				return nil, fmt.Errorf("unterminated string in Literal[%s]", s)
			}
			out = append(out, s[1:1+j])
			s = strings.TrimSpace(s[j+2:])
		default:
			end := strings.IndexByte(s, ',')
			if end < 0 {
				end = len(s)
			}
			lit = strings.TrimSpace(s[:end])
			s = s[end:]
			switch lit {
			case "True", "true":
				out = append(out, true)
			case "False", "false":
				out = append(out, false)
			case "None", "null":
				out = append(out, nil)
			default:
				f, err := strconv.ParseFloat(lit, 64)
				if err != nil {
					return nil, fmt.Errorf("literal %q is not a string, number or boolean", lit)
				}
				out = append(out, json.Number(strconv.FormatFloat(f, 'g', -1, 64)))
			}
		}
		if s != "" {
			if s[0] != ',' {
				return nil, fmt.Errorf("expected , between literals, found %q", s)
			}
			s = strings.TrimSpace(s[1:])
		}
	}
	if len(out) == 0 {
		return nil, errors.New("a Literal[] type needs at least one value")
	}
	return out, nil
}

// schemaType returns the simple context-variable type of a field type
// (TypeAny for models and enums of mixed values).
func (t *fieldType) varType() string {
	switch t.kind {
	case "str":
		return TypeStr
	case "int":
		return TypeInt
	case "float":
		return TypeFloat
	case "bool":
		return TypeBool
	case "list":
		return TypeList
	case "dict", "model":
		return TypeDict
	case "enum":
		for _, v := range t.values {
			if _, ok := v.(string); !ok {
				return TypeAny
			}
		}
		return TypeStr
	}
	return TypeAny
}

// jsonSchema builds the JSON Schema of a field type. It records the models
// it refers to in refs and clears *strict when the type cannot be strict.
func (t *fieldType) jsonSchema(refs *[]string, strict *bool) map[string]any {
	var s map[string]any
	switch t.kind {
	case "str":
		s = map[string]any{"type": "string"}
	case "int":
		s = map[string]any{"type": "integer"}
	case "float":
		s = map[string]any{"type": "number"}
	case "bool":
		s = map[string]any{"type": "boolean"}
	case "dict":
		*strict = false
		s = map[string]any{"type": "object"}
	case "list":
		s = map[string]any{"type": "array", "items": t.elem.jsonSchema(refs, strict)}
	case "enum":
		vals := append([]any(nil), t.values...)
		typ := enumType(vals)
		if t.nullable {
			vals = append(vals, nil)
		}
		s = map[string]any{"enum": vals}
		if typ != "" {
			if t.nullable {
				s["type"] = []any{typ, "null"}
			} else {
				s["type"] = typ
			}
		}
		return s
	case "model":
		*refs = append(*refs, t.model)
		ref := map[string]any{"$ref": "#/$defs/" + t.model}
		if t.nullable {
			return map[string]any{"anyOf": []any{ref, map[string]any{"type": "null"}}}
		}
		return ref
	}
	if t.nullable {
		s["type"] = []any{s["type"], "null"}
	}
	return s
}

// objectSchema builds the strict object schema of a model's fields.
func (m *Model) objectSchema(refs *[]string, strict *bool) *orderedObject {
	props := &orderedObject{}
	required := make([]any, 0, len(m.FieldOrder))
	for _, name := range m.FieldOrder {
		ft := m.types[name]
		if ft == nil {
			continue
		}
		fs := ft.jsonSchema(refs, strict)
		if d := m.Fields[name].Description; d != "" {
			fs["description"] = d
		}
		props.set(name, fs)
		required = append(required, name)
	}
	o := &orderedObject{}
	o.set("type", "object")
	if m.Description != "" {
		o.set("description", m.Description)
	}
	o.set("properties", props)
	o.set("required", required)
	o.set("additionalProperties", false)
	return o
}

// compileModels compiles every model's schema and validator. Field types
// must already be parsed and model references checked.
func (w *Workflow) compileModels() error {
	registered := map[string]struct{}{}
	for _, model := range w.Registry {
		registered[model] = struct{}{}
	}
	for _, m := range w.Models {
		strict := true
		var refs []string
		root := m.objectSchema(&refs, &strict)
		defs := &orderedObject{}
		seen := map[string]bool{m.Name: true}
		for len(refs) > 0 {
			name := refs[0]
			refs = refs[1:]
			if seen[name] && name != m.Name {
				continue
			}
			if name == m.Name {
				// A model that refers to itself points at the root.
				continue
			}
			seen[name] = true
			defs.set(name, w.models[name].objectSchema(&refs, &strict))
		}
		if len(defs.keys) > 0 {
			root.set("$defs", defs)
		}
		data, err := json.MarshalIndent(root, "", "  ")
		if err != nil {
			return fmt.Errorf("model %s: %w", m.Name, err)
		}
		// A self-reference is written as #/$defs/Name; make it point at the root.
		data = bytes.ReplaceAll(data, []byte(`"#/$defs/`+m.Name+`"`), []byte(`"#"`))
		m.schema, m.strict = data, strict
		if _, registered := registered[m.Name]; registered {
			// A model an agent answers with is compiled now, so that a
			// mistake shows at load; the others (only used nested) when
			// first validated against.
			if err := m.compile(); err != nil {
				return err
			}
		}
	}
	return nil
}

// compile compiles the validator once.
func (m *Model) compile() error {
	m.once.Do(func() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(m.schema))
		if err != nil {
			m.compileErr = fmt.Errorf("model %s: %w", m.Name, err)
			return
		}
		c := newCompiler()
		url := "baton:///models/" + m.Name + ".json"
		if err := c.AddResource(url, doc); err != nil {
			m.compileErr = fmt.Errorf("model %s: %w", m.Name, err)
			return
		}
		if m.validator, err = c.Compile(url); err != nil {
			m.compileErr = fmt.Errorf("model %s: %w", m.Name, err)
		}
	})
	return m.compileErr
}

// orderedObject is a JSON object that keeps its keys in insertion order, so
// that schemas list properties in the order the author wrote them.
type orderedObject struct {
	keys []string
	vals []any
}

func (o *orderedObject) set(k string, v any) {
	o.keys = append(o.keys, k)
	o.vals = append(o.vals, v)
}

// MarshalJSON writes the object with its keys in order.
func (o *orderedObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		vb, err := json.Marshal(o.vals[i])
		if err != nil {
			return nil, err
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// compileParameters compiles a tool's parameter schema.
func compileParameters(name string, raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := newCompiler()
	url := "baton:///tools/" + name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// newCompiler returns a draft 2020-12 compiler that loads nothing from
// outside: a workflow's schemas must be self-contained.
func newCompiler() *jsonschema.Compiler {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(jsonschema.SchemeURLLoader{})
	return c
}

// enumType returns the JSON Schema type shared by all values ("string",
// "integer", "number" or "boolean"), or "" when they are mixed.
func enumType(vals []any) string {
	typ := ""
	for _, v := range vals {
		var t string
		switch v := v.(type) {
		case string:
			t = "string"
		case bool:
			t = "boolean"
		case float64:
			t = "number"
			if v == float64(int64(v)) {
				t = "integer"
			}
		case json.Number:
			t = "number"
			if _, err := v.Int64(); err == nil {
				t = "integer"
			}
		default:
			return ""
		}
		switch {
		case typ == "":
			typ = t
		case typ == t:
		case typ == "integer" && t == "number", typ == "number" && t == "integer":
			typ = "number"
		default:
			return ""
		}
	}
	return typ
}
