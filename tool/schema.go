package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// schema is a compiled argument schema.
type schema struct {
	s *jsonschema.Schema
}

// noLoader refuses every external $ref: a schema from tools.json or an MCP
// server may not make baton read files or fetch URLs.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema %s is not allowed", url)
}

const schemaURL = "mem:///parameters.json"

// compileSchema compiles a JSON Schema of tool arguments. The schema must
// describe an object (its "type", when given, is "object"), which is what
// model APIs accept.
func compileSchema(raw json.RawMessage) (*schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, errors.New("must be a JSON object")
	}
	if t, ok := obj["type"]; ok && t != "object" {
		return nil, fmt.Errorf(`"type" must be "object", not %v`, t)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, err
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		return nil, err
	}
	return &schema{s: s}, nil
}

var printer = message.NewPrinter(language.English)

// validate checks args against the schema and returns "" when they are
// valid, or a message for the model naming each problem and where it is.
func (s *schema) validate(args json.RawMessage) string {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return "not valid JSON: " + err.Error()
	}
	if _, ok := inst.(map[string]any); !ok {
		return "the arguments must be a JSON object"
	}
	if s == nil || s.s == nil {
		return ""
	}
	err = s.s.Validate(inst)
	if err == nil {
		return ""
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	var msgs []string
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			loc := "/" + strings.Join(e.InstanceLocation, "/")
			msgs = append(msgs, fmt.Sprintf("at %s: %s", loc, e.ErrorKind.LocalizedString(printer)))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	slices.Sort(msgs)
	msgs = slices.Compact(msgs)
	return strings.Join(msgs, "; ")
}
