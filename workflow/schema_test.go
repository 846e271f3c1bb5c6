package workflow_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/workflow"
	"github.com/batonhq/baton/workflows"
)

// TestGoldenSchemas compares every compiled model schema with
// testdata/golden/WORKFLOW/MODEL.json (go test -update rewrites them).
func TestGoldenSchemas(t *testing.T) {
	gen, err := workflow.Load(workflows.FS, "generator")
	if err != nil {
		t.Fatal(err)
	}
	types, err := workflow.Load(os.DirFS("testdata/valid"), "types")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []*workflow.Workflow{gen, types} {
		for _, m := range w.Models {
			t.Run(w.Name+"/"+m.Name, func(t *testing.T) {
				file := filepath.Join("testdata/golden", w.Name, m.Name+".json")
				got := append(append([]byte(nil), m.Schema()...), '\n')
				if *update {
					_ = os.MkdirAll(filepath.Dir(file), 0o755)
					if err := os.WriteFile(file, got, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("schema differs from %s:\n%s", file, got)
				}
				checkStrict(t, m)
			})
		}
	}
}

// checkStrict verifies the strict-mode rules on a strict model's schema:
// every object has additionalProperties false and requires all its properties.
func checkStrict(t *testing.T, m *workflow.Model) {
	t.Helper()
	var doc any
	if err := json.Unmarshal(m.Schema(), &doc); err != nil {
		t.Fatal(err)
	}
	objects := 0
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if props, ok := v["properties"].(map[string]any); ok {
				objects++
				req, _ := v["required"].([]any)
				if len(req) != len(props) {
					t.Errorf("%s: required %v does not list every property", m.Name, req)
				}
				if v["additionalProperties"] != false {
					t.Errorf("%s: additionalProperties is not false", m.Name)
				}
			} else if v["type"] == "object" && m.Strict() {
				t.Errorf("%s is strict but has an open object", m.Name)
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	if objects == 0 {
		t.Errorf("%s: no object schema", m.Name)
	}
}

func TestStrictness(t *testing.T) {
	w, err := workflow.Load(os.DirFS("testdata/valid"), "types")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"Report": true, "Person": true, "Section": true, "Loose": false} {
		if got := w.Model(name).Strict(); got != want {
			t.Errorf("%s.Strict() = %v, want %v", name, got, want)
		}
	}
}

func TestModelValidate(t *testing.T) {
	w, err := workflow.Load(os.DirFS("testdata/valid"), "types")
	if err != nil {
		t.Fatal(err)
	}
	m := w.OutputModel("Writer")
	valid := `{"title": "T", "pages": 3, "score": 0.5, "final": false, "tags": ["a"], "matrix": [[1, 2]],
		"subtitle": null, "reviewer": "R", "status": "draft", "level": 2, "mood": null,
		"author": {"name": "A", "email": null}, "editor": null,
		"sections": [{"heading": "H", "children": [{"heading": "H2", "children": []}]}]}`
	if _, err := m.ValidateJSON([]byte(valid)); err != nil {
		t.Fatalf("valid output rejected: %v", err)
	}
	for _, c := range []struct {
		name, mutate, want string
	}{
		{"missing field", `{"title": null}`, "Report.title: got null, want string"},
		{"wrong type", `{"pages": "3"}`, "Report.pages: got string, want integer"},
		{"not an integer", `{"pages": 3.5}`, "Report.pages: got number, want integer"},
		{"enum", `{"status": "published"}`, "Report.status: value must be one of 'draft', 'final'"},
		{"nested", `{"author": {"name": 1, "email": null}}`, "Report.author.name: got number, want string"},
		{"nested missing", `{"author": {"name": "A"}}`, "Report.author.email: missing"},
		{"list item", `{"tags": ["a", 2]}`, "Report.tags[1]: got number, want string"},
		{"extra field", `{"author": {"name": "A", "email": null, "age": 3}}`, "Report.author: additional properties 'age' not allowed"},
		{"recursive", `{"sections": [{"heading": "H", "children": [{"heading": 5, "children": []}]}]}`, "Report.sections[0].children[0].heading: got number, want string"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var base, patch map[string]any
			_ = json.Unmarshal([]byte(valid), &base)
			_ = json.Unmarshal([]byte(c.mutate), &patch)
			for k, v := range patch {
				base[k] = v
			}
			err := m.Validate(base)
			if err == nil {
				t.Fatal("invalid output accepted")
			}
			if !errors.Is(err, baton.ErrInvalid) {
				t.Errorf("error is not EINVALID: %v", err)
			}
			if got := baton.ErrorMessage(err); got != c.want {
				t.Errorf("message %q, want %q", got, c.want)
			}
		})
	}
	// A missing top-level field is named.
	err = m.Validate(map[string]any{})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("Report.title: missing")) {
		t.Errorf("missing fields: %v", err)
	}
	if _, err := m.ValidateJSON([]byte(`{"title": `)); err == nil {
		t.Error("malformed JSON accepted")
	}
}
