package workflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
)

// Definition is a workflow written in Go: what its six files hold, as the
// same types a loaded Workflow exposes. Build validates it with the code
// that validates the files, so a mistake gets the message it would get in
// JSON; WriteDir writes a built workflow out as the six files.
//
// Entries keyed by name in JSON (agents, variables, models) carry their name
// in their Name field, and their order here is their order in the files.
// Fields the loader fills in (Tool.Index, Tool.Schema, Tool.SecretNames,
// HandoffRule.Index, HandoffRule.Compiled) are ignored.
type Definition struct {
	Config           Config             // workflow.json; Config.Name is the workflow's name
	Agents           []*Agent           // agents.json
	Handoffs         []*HandoffRule     // handoffs.json
	Tools            []*Tool            // tools.json
	Variables        []*Variable        // context_variables.json variables
	DerivedVariables []*DerivedVariable // context_variables.json derived_variables
	// Models are structured_outputs.json's models; a model lists its fields
	// in FieldOrder (when FieldOrder is empty, Build orders them by name).
	Models []*Model
	// Registry maps an agent name to the name of its structured-output model.
	Registry map[string]string

	// FS and Dir say where the files a workflow runs live: command tools at
	// Dir/tools/FILE in FS, stdio MCP servers at Dir/COMMAND. Leave them
	// empty when the workflow has neither. The engine runs command tools
	// from disk, at its WorkflowRoot joined with Dir.
	FS  fs.FS
	Dir string
}

// Build validates def and returns the workflow it defines: the same
// *Workflow that Load returns for the six files holding def. The error, when
// def has mistakes, is a ValidationErrors whose messages are the ones Load
// gives for the same mistakes in JSON, naming the file and JSON path (files
// are named under Dir, or under Config.Name when Dir is empty). A Go value has
// no line and column, so mistakes within one file are listed in the order
// validation finds them rather than by position. Build copies def; changing
// def afterwards does not change the workflow.
func Build(def Definition) (*Workflow, error) {
	dir := path.Clean(def.Dir)
	if def.Dir == "" {
		dir = "."
	}
	fsys := def.FS
	if fsys == nil {
		fsys = emptyFS{}
	}
	prefix := dir
	if dir == "." {
		prefix = def.Config.Name
	}
	l := newLoader(&Workflow{Dir: dir, FS: fsys}, prefix)
	if dir != "." {
		l.w.Name = path.Base(dir)
	}
	d := def.clone(l.errorf)
	l.w.Config = d.Config
	l.agents = d.Agents
	l.handoffsF.HandoffRules = d.Handoffs
	l.toolsF.Tools = d.Tools
	l.variables = d.Variables
	l.contextF.DerivedVariables = d.DerivedVariables
	l.models = d.Models
	l.structuredF.StructuredOutputs.Registry = d.Registry
	l.registry = slices.Sorted(maps.Keys(d.Registry))
	return l.finish()
}

// Definition returns the workflow's definition: a deep copy of what its six
// files hold, with the defaults the loader filled in (a tool's name, kinds,
// the startup mode…), in a canonical form (JSON values re-encoded compactly,
// empty lists and maps as nil). Two workflows with equal definitions
// (reflect.DeepEqual) behave the same. Change the copy and Build it to derive
// a workflow from a loaded one.
func (w *Workflow) Definition() Definition {
	d := Definition{
		Config:           w.Config,
		Agents:           w.Agents,
		Handoffs:         w.Handoffs,
		Tools:            w.Tools,
		Variables:        w.Variables,
		DerivedVariables: w.DerivedVariables,
		Models:           w.Models,
		Registry:         w.Registry,
		FS:               w.FS,
		Dir:              w.Dir,
	}
	return d.clone(func(string, string, string, ...any) {})
}

// clone returns a deep copy of d in canonical form. A nil entry of a list
// keyed by name in JSON, and a value that does not encode as JSON, are
// reported to errorf; nil tools, rules and derived variables are kept for
// validation to report as JSON null.
func (d Definition) clone(errorf func(file, p, format string, args ...any)) Definition {
	out := Definition{Config: cloneConfig(d.Config), FS: d.FS, Dir: d.Dir}
	for i, a := range d.Agents {
		if a == nil {
			errorf(FileAgents, fmt.Sprintf("agents[%d]", i), "must not be nil")
			continue
		}
		c := *a
		c.template, c.visual, c.toolAg, c.model, c.tools, c.autoTool = nil, false, false, nil, nil, nil
		c.LLM = cloneLLM(a.LLM)
		c.Tools = nilIfEmpty(slices.Clone(a.Tools))
		out.Agents = append(out.Agents, &c)
	}
	for _, r := range d.Handoffs {
		if r == nil {
			out.Handoffs = append(out.Handoffs, nil)
			continue
		}
		c := *r
		c.Index, c.Compiled = 0, nil
		out.Handoffs = append(out.Handoffs, &c)
	}
	for i, t := range d.Tools {
		if t == nil {
			out.Tools = append(out.Tools, nil)
			continue
		}
		c := *t
		c.Index, c.Schema, c.SecretNames = 0, nil, nil
		p := fmt.Sprintf("tools[%d]", i)
		c.Parameters = compactRaw(t.Parameters, func(err error) { errorf(FileTools, p+".parameters", "not JSON: %v", err) })
		c.Arguments = compactRaw(t.Arguments, func(err error) { errorf(FileTools, p+".arguments", "not JSON: %v", err) })
		if t.UI != nil {
			ui := *t.UI
			c.UI = &ui
		}
		c.Headers = cloneMap(t.Headers)
		c.HeadersFromEnv = cloneMap(t.HeadersFromEnv)
		c.Env = nilIfEmpty(slices.Clone(t.Env))
		c.Tools = nilIfEmpty(slices.Clone(t.Tools))
		out.Tools = append(out.Tools, &c)
	}
	for i, v := range d.Variables {
		if v == nil {
			errorf(FileContextVariables, fmt.Sprintf("variables[%d]", i), "must not be nil")
			continue
		}
		c := *v
		c.Default = jsonValue(v.Default, func(err error) {
			errorf(FileContextVariables, "variables."+v.Name+".default", "not JSON: %v", err)
		})
		out.Variables = append(out.Variables, &c)
	}
	for _, dv := range d.DerivedVariables {
		if dv == nil {
			out.DerivedVariables = append(out.DerivedVariables, nil)
			continue
		}
		c := *dv
		out.DerivedVariables = append(out.DerivedVariables, &c)
	}
	for i, m := range d.Models {
		if m == nil {
			errorf(FileStructuredOutputs, fmt.Sprintf("structured_outputs.models[%d]", i), "must not be nil")
			continue
		}
		c := &Model{Name: m.Name, Type: m.Type, Description: m.Description, FieldOrder: slices.Clone(m.FieldOrder)}
		if len(c.FieldOrder) == 0 {
			c.FieldOrder = slices.Sorted(maps.Keys(m.Fields))
		}
		p := "structured_outputs.models." + m.Name
		for _, name := range c.FieldOrder {
			if _, ok := m.Fields[name]; !ok {
				errorf(FileStructuredOutputs, p+".fields", "FieldOrder names %q, which is not in Fields", name)
			}
		}
		for name, f := range m.Fields {
			if !slices.Contains(c.FieldOrder, name) {
				errorf(FileStructuredOutputs, p+".fields."+name, "not in FieldOrder")
				continue
			}
			if c.Fields == nil {
				c.Fields = map[string]*Field{}
			}
			if f == nil {
				c.Fields[name] = nil
				continue
			}
			fc := *f
			if f.Values != nil {
				vals, _ := jsonValue(f.Values, func(err error) {
					errorf(FileStructuredOutputs, p+".fields."+name+".values", "not JSON: %v", err)
				}).([]any)
				fc.Values = nilIfEmpty(vals)
			}
			c.Fields[name] = &fc
		}
		c.FieldOrder = nilIfEmpty(c.FieldOrder)
		out.Models = append(out.Models, c)
	}
	out.Registry = cloneMap(d.Registry)
	return out
}

func cloneConfig(c Config) Config {
	c.VisualAgents = nilIfEmpty(slices.Clone(c.VisualAgents))
	c.LLM = *cloneLLM(&c.LLM)
	c.Pricing = cloneMap(c.Pricing)
	if len(c.MCPServers) == 0 {
		c.MCPServers = nil
	} else {
		servers := make(map[string]MCPServer, len(c.MCPServers))
		for name, s := range c.MCPServers {
			s.Args = nilIfEmpty(slices.Clone(s.Args))
			s.Env = cloneMap(s.Env)
			s.Headers = cloneMap(s.Headers)
			s.HeadersFromEnv = cloneMap(s.HeadersFromEnv)
			servers[name] = s
		}
		c.MCPServers = servers
	}
	return c
}

func cloneLLM(c *LLMConfig) *LLMConfig {
	if c == nil {
		return nil
	}
	out := *c
	if c.Temperature != nil {
		t := *c.Temperature
		out.Temperature = &t
	}
	if c.CacheSeed != nil {
		s := *c.CacheSeed
		out.CacheSeed = &s
	}
	return &out
}

// cloneMap copies m; an empty map becomes nil, as a file without the
// object decodes.
func cloneMap[M ~map[K]V, K comparable, V any](m M) M {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

func nilIfEmpty[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return nil
	}
	return s
}

// compactRaw returns raw compacted (nil for nothing or JSON null), so that
// a re-indented file decodes to an equal value.
func compactRaw(raw json.RawMessage, bad func(error)) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		bad(err)
		return slices.Clone(raw)
	}
	if b.String() == "null" {
		return nil
	}
	return b.Bytes()
}

// jsonValue returns v as encoding/json decodes it into an any (numbers as
// float64, objects as map[string]any): what the loader holds for the same
// value in a file. It is also a deep copy.
func jsonValue(v any, bad func(error)) any {
	if v == nil {
		return nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		bad(err)
		return v
	}
	var out any
	_ = json.Unmarshal(data, &out)
	return out
}

// emptyFS is the file system of a Definition without one: it holds no file.
type emptyFS struct{}

func (emptyFS) Open(name string) (fs.File, error) {
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}
