package tool

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/batonhq/baton"
)

// CheckClientTools checks the tools a client offers a chat
// (baton.ClientTool): at most baton.MaxClientTools, each named as a model
// API accepts (1 to 64 letters, digits, '_' or '-'), once, with parameters
// that compile as a JSON Schema of an object, within the size limits. The
// error names the field at fault, as tools[i].name. Whether a name collides
// with a workflow's tool is the engine's to say (Engine.CheckClientTools).
func CheckClientTools(tools []baton.ClientTool) error {
	if len(tools) > baton.MaxClientTools {
		return baton.Errorf(baton.EINVALID, "tools: more than %d tools", baton.MaxClientTools)
	}
	seen := make(map[string]int, len(tools))
	total := 0
	for i, t := range tools {
		field := fmt.Sprintf("tools[%d]", i)
		if err := checkClientToolName(t.Name); err != nil {
			return baton.Errorf(baton.EINVALID, "%s.name: %v", field, err)
		}
		if j, dup := seen[t.Name]; dup {
			return baton.Errorf(baton.EINVALID, "%s.name: %q is offered twice (also tools[%d])", field, t.Name, j)
		}
		seen[t.Name] = i
		if err := baton.ValidateText(field+".description", t.Description); err != nil {
			return err
		}
		size := len(t.Name) + len(t.Description) + len(t.Parameters)
		if size > baton.MaxClientToolBytes {
			return baton.Errorf(baton.EINVALID, "%s: larger than %d bytes", field, baton.MaxClientToolBytes)
		}
		total += size
		if p := bytes.TrimSpace(t.Parameters); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
			if _, err := compileSchema(p); err != nil {
				return baton.Errorf(baton.EINVALID, "%s.parameters: not a usable JSON Schema: %v", field, err)
			}
			if err := baton.ValidateJSONB(field+".parameters", p); err != nil {
				return err
			}
		}
	}
	if total > baton.MaxClientToolsBytes {
		return baton.Errorf(baton.EINVALID, "tools: larger than %d bytes together", baton.MaxClientToolsBytes)
	}
	return nil
}

func checkClientToolName(name string) error {
	if name == "" {
		return fmt.Errorf("required")
	}
	if len(name) > 64 {
		return fmt.Errorf("%q is longer than 64 characters", name[:64]+"…")
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%q must be 1 to 64 letters, digits, '_' or '-'", name)
		}
	}
	return nil
}

// ClientToolParameters returns a client tool's parameters as offered to a
// model: its schema, or an object with no properties when it gave none.
func ClientToolParameters(t baton.ClientTool) json.RawMessage {
	if p := bytes.TrimSpace(t.Parameters); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		return p
	}
	return json.RawMessage(`{"type":"object","properties":{}}`)
}

// CheckClientArgs checks a model's arguments for a call of client tool t
// against its parameters. It returns "" when they are valid, else a message
// for the model naming each problem (the call is then answered with it as
// an error, and the client never sees it).
func CheckClientArgs(t baton.ClientTool, args json.RawMessage) string {
	s, err := compileSchema(ClientToolParameters(t))
	if err != nil {
		return "the tool's parameters are not a usable JSON Schema: " + err.Error()
	}
	return s.validate(args)
}
