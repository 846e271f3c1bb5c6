package server

import (
	"bytes"
	"encoding/json"

	"github.com/batonhq/baton/workflow"
)

// A workflow's UI tools, as OpenAI function tools: a UI tool the chat waits
// for is an assistant tool call whose function carries, next to its name
// and arguments, the tool's JSON Schema (parameters), and GET /v1/models
// lists every UI tool of a workflow so that a client can register a
// renderer for each before its first request. A secret form is listed
// apart, as a form answered in the web UI: never as a callable tool.

// oaiAnyObject is the schema of a UI tool that declares no parameters: the
// one its tool registry offers the model (any object).
var oaiAnyObject = json.RawMessage(`{"type":"object"}`)

// oaiModelExtension is a model's "baton" object: its UI tools.
type oaiModelExtension struct {
	// Tools are the UI tools a chat may wait for, answered with a tool
	// message (docs/openai.md, "UI tools and forms").
	Tools []oaiToolDef `json:"tools"`
	// SecretForms are the forms that ask for secrets: a chat that waits
	// for one is answered in the web UI only, never over this API.
	SecretForms []oaiSecretForm `json:"secret_forms"`
}

// oaiToolDef is an OpenAI function tool definition, with baton's
// extension: the component that shows it.
type oaiToolDef struct {
	Type     string            `json:"type"`
	Function oaiFunctionDef    `json:"function"`
	Baton    *oaiToolExtension `json:"baton,omitempty"`
}

type oaiFunctionDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

// oaiSecretForm is a secret form as the models list shows it: what it is,
// not what it asks for.
type oaiSecretForm struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Agent       string `json:"agent,omitempty"`
	Component   string `json:"component,omitempty"`
}

// oaiUITools lists wf's UI tools (kind ui: UI_Tool entries and lifecycle
// forms), in file order, the secret forms apart.
func oaiUITools(wf *workflow.Workflow) *oaiModelExtension {
	ext := &oaiModelExtension{Tools: []oaiToolDef{}, SecretForms: []oaiSecretForm{}}
	for _, t := range wf.Tools {
		if t.Kind != workflow.KindUI {
			continue
		}
		comp, mode := "", ""
		if t.UI != nil {
			comp, mode = t.UI.Component, t.UI.Mode
		}
		if t.IsSecretForm() {
			ext.SecretForms = append(ext.SecretForms, oaiSecretForm{Name: oaiToolName(t), Description: t.Description, Agent: t.Agent, Component: comp})
			continue
		}
		ext.Tools = append(ext.Tools, oaiToolDef{
			Type:     "function",
			Function: oaiFunctionDef{Name: oaiToolName(t), Description: t.Description, Parameters: oaiSchemaOf(t)},
			Baton:    &oaiToolExtension{Component: comp, Mode: mode, Agent: t.Agent},
		})
	}
	return ext
}

// oaiToolSchema returns the JSON Schema of wf's UI tool name, for its tool
// call's function.parameters: nil when wf has no such UI tool (or it is a
// secret form, never a tool call here).
func oaiToolSchema(wf *workflow.Workflow, name string) json.RawMessage {
	if wf == nil {
		return nil
	}
	for _, t := range wf.Tools {
		if t.Kind == workflow.KindUI && !t.IsSecretForm() && oaiToolName(t) == name {
			return oaiSchemaOf(t)
		}
	}
	return nil
}

// oaiSchemaOf is a UI tool's parameters, compacted (the file's layout is
// not the wire's), or any object when it declares none.
func oaiSchemaOf(t *workflow.Tool) json.RawMessage {
	if len(bytes.TrimSpace(t.Parameters)) == 0 {
		return oaiAnyObject
	}
	var b bytes.Buffer
	if json.Compact(&b, t.Parameters) != nil {
		return oaiAnyObject // checked at load: cannot happen
	}
	return b.Bytes()
}

// oaiToolName is a tools.json entry's name as the model and the events see
// it: name, or function when it has none.
func oaiToolName(t *workflow.Tool) string {
	if t.Name != "" {
		return t.Name
	}
	return t.Function
}
