package workflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Files returns the six files of the workflow (by file name: FileWorkflow,
// FileAgents, …), indented JSON that Load reads back into a workflow with an
// equal Definition. Fields at their zero value are left out, and the
// defaults the loader filled in are written out.
func (w *Workflow) Files() (map[string][]byte, error) {
	d := w.Definition()
	agents := &fileObject{}
	for _, a := range d.Agents {
		agents.set(a.Name, a)
	}
	vars := &fileObject{}
	for _, v := range d.Variables {
		vars.set(v.Name, v)
	}
	models := &fileObject{}
	for _, m := range d.Models {
		models.set(m.Name, modelFile(m))
	}
	registry := &fileObject{}
	for _, agent := range slices.Sorted(maps.Keys(d.Registry)) {
		registry.set(agent, d.Registry[agent])
	}
	handoffs := d.Handoffs
	if handoffs == nil {
		handoffs = []*HandoffRule{}
	}
	tools := d.Tools
	if tools == nil {
		tools = []*Tool{}
	}
	ctx := &fileObject{}
	ctx.set("variables", vars)
	if len(d.DerivedVariables) > 0 {
		ctx.set("derived_variables", d.DerivedVariables)
	}
	so := &fileObject{}
	so.set("models", models)
	so.set("registry", registry)
	values := map[string]any{
		FileWorkflow:          d.Config,
		FileAgents:            map[string]any{"agents": agents},
		FileHandoffs:          map[string]any{"handoff_rules": handoffs},
		FileTools:             map[string]any{"tools": tools},
		FileContextVariables:  ctx,
		FileStructuredOutputs: map[string]any{"structured_outputs": so},
	}
	out := make(map[string][]byte, len(values))
	for name, v := range values {
		data, err := marshalIndent(v, "  ")
		if err != nil {
			return nil, fmt.Errorf("workflow %s: encode %s: %w", w.Name, name, err)
		}
		out[name] = data
	}
	return out, nil
}

// WriteDir writes the workflow to the folder dir (created when missing) as
// its six JSON files (see Files), replacing files of those names, and copies
// the other files of the workflow's folder in its FS (tools/, scripted.json
// …) along: the folder then loads back as an equal workflow and runs the
// same command tools. Files under tools/ are written executable (files
// embedded with go:embed lose their modes).
func (w *Workflow) WriteDir(dir string) error {
	files, err := w.Files()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("workflow %s: write: %w", w.Name, err)
	}
	if err := w.copyFolder(dir); err != nil {
		return fmt.Errorf("workflow %s: copy %s: %w", w.Name, w.Dir, err)
	}
	for _, name := range fileOrder {
		if err := os.WriteFile(filepath.Join(dir, name), files[name], 0o644); err != nil {
			return fmt.Errorf("workflow %s: write: %w", w.Name, err)
		}
	}
	return nil
}

// copyFolder copies every file of the workflow's folder in w.FS but the six
// JSON files into dir.
func (w *Workflow) copyFolder(dir string) error {
	if w.FS == nil {
		return nil
	}
	err := fs.WalkDir(w.FS, w.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p, w.Dir), "/")
		if w.Dir == "." {
			rel = p
		}
		if rel == "." || rel == "" || slices.Contains(fileOrder, rel) {
			return nil
		}
		dst := filepath.Join(dir, filepath.FromSlash(rel))
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := fs.ReadLink(w.FS, p)
			if err != nil {
				return err
			}
			_ = os.Remove(dst)
			return os.Symlink(target, dst)
		case d.IsDir():
			return os.MkdirAll(dst, 0o755)
		}
		data, err := fs.ReadFile(w.FS, p)
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if info, err := d.Info(); err == nil && info.Mode().Perm()&0o111 != 0 || strings.HasPrefix(rel, "tools/") {
			mode = 0o755
		}
		if err := os.WriteFile(dst, data, mode); err != nil {
			return err
		}
		return os.Chmod(dst, mode) // WriteFile keeps the mode of a file that exists
	})
	if errors.Is(err, fs.ErrNotExist) && !pathExists(w.FS, w.Dir) {
		return nil // a Definition without files
	}
	return err
}

func pathExists(fsys fs.FS, p string) bool {
	_, err := fs.Stat(fsys, p)
	return err == nil
}

// modelFile is a model as structured_outputs.json holds it: its fields in
// FieldOrder.
func modelFile(m *Model) *fileObject {
	o := &fileObject{}
	if m.Type != "" {
		o.set("type", m.Type)
	}
	if m.Description != "" {
		o.set("description", m.Description)
	}
	fields := &fileObject{}
	for _, name := range m.FieldOrder {
		fields.set(name, m.Fields[name])
	}
	o.set("fields", fields)
	return o
}

// marshalIndent encodes v as indented JSON without escaping <, > and &
// (system messages hold them; the file stays readable).
func marshalIndent(v any, indent string) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", indent)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// fileObject is a JSON object of a workflow file, written with its keys in
// order (agents, variables and fields in the order they were defined).
type fileObject struct {
	keys []string
	vals []any
}

func (o *fileObject) set(k string, v any) {
	o.keys = append(o.keys, k)
	o.vals = append(o.vals, v)
}

// MarshalJSON writes the object with its keys in order.
func (o *fileObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		for j, v := range []any{k, o.vals[i]} {
			data, err := marshalIndent(v, "")
			if err != nil {
				return nil, err
			}
			b.Write(bytes.TrimRight(data, "\n"))
			if j == 0 {
				b.WriteByte(':')
			}
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
