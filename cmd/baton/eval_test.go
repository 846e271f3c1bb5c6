package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The JUnit XML shape CI systems read (testsuites > testsuite > testcase,
// with failure or error), declared here apart from the writer's types, so
// that the test reads the file as a CI system would.
type junitDoc struct {
	XMLName  xml.Name `xml:"testsuites"`
	Tests    string   `xml:"tests,attr"`
	Failures string   `xml:"failures,attr"`
	Errors   string   `xml:"errors,attr"`
	Suites   []struct {
		Name     string `xml:"name,attr"`
		Tests    string `xml:"tests,attr"`
		Failures string `xml:"failures,attr"`
		Errors   string `xml:"errors,attr"`
		Time     string `xml:"time,attr"`
		Cases    []struct {
			Name      string `xml:"name,attr"`
			Classname string `xml:"classname,attr"`
			Time      string `xml:"time,attr"`
			Failure   *struct {
				Message string `xml:"message,attr"`
				Text    string `xml:",chardata"`
			} `xml:"failure"`
			Error *struct {
				Message string `xml:"message,attr"`
			} `xml:"error"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// TestEval_Folder runs testdata/eval: passing cases (the generator
// approved, a chat left waiting for its secret form, hello), failing ones
// (a wrong status, arguments that do not match the pattern) and one that
// cannot run (an unknown workflow). The verdicts, the summary's counts, a
// JUnit XML that parses in the schema's shape and the JSON output agree;
// the exit status is 1.
func TestEval_Folder(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "")
	ctx := context.Background()
	junit := filepath.Join(t.TempDir(), "eval.xml")
	var out, errb bytes.Buffer
	code := run(ctx, []string{"eval", "testdata/eval", "--parallel", "3", "--junit", junit}, &out, &errb)
	if code != 1 {
		t.Fatalf("eval: exit %d, want 1\n%s\n%s", code, out.String(), errb.String())
	}
	verdicts := map[string]string{}
	for line := range strings.SplitSeq(out.String(), "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			for _, name := range []string{"approve the plan", "waits_for_secret", "hello", "wrong_status", "wrong_arguments", "unknown_workflow"} {
				if strings.HasPrefix(line, name+" ") {
					verdicts[name] = strings.Fields(strings.TrimPrefix(line, name))[0]
				}
			}
		}
	}
	want := map[string]string{"approve the plan": "pass", "waits_for_secret": "pass", "hello": "pass", "wrong_status": "FAIL", "wrong_arguments": "FAIL", "unknown_workflow": "error"}
	for name, v := range want {
		if verdicts[name] != v {
			t.Errorf("%s: %q, want %q\n%s", name, verdicts[name], v, out.String())
		}
	}
	for _, s := range []string{
		"6 cases: 3 passed, 2 failed, 1 errors",
		"status: want waiting_input, got completed",
		`tool_calls[0] action_plan: arguments $.workflow.name: want "Daily Digest", got "Weekly Newsletter"`,
		`workflow "nope": not one of the built-in examples`,
	} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, out.String())
		}
	}

	raw, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var doc junitDoc
	dec := xml.NewDecoder(bytes.NewReader(raw))
	dec.Strict = true
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("JUnit XML does not parse: %v\n%s", err, raw)
	}
	if doc.Tests != "6" || doc.Failures != "2" || doc.Errors != "1" || len(doc.Suites) != 1 {
		t.Fatalf("testsuites: tests %s failures %s errors %s, %d suites\n%s", doc.Tests, doc.Failures, doc.Errors, len(doc.Suites), raw)
	}
	s := doc.Suites[0]
	if s.Tests != "6" || s.Failures != "2" || s.Errors != "1" || len(s.Cases) != 6 || s.Name == "" {
		t.Fatalf("testsuite: %+v", s)
	}
	if _, err := strconv.ParseFloat(s.Time, 64); err != nil {
		t.Errorf("testsuite time %q: %v", s.Time, err)
	}
	for _, c := range s.Cases {
		if _, err := strconv.ParseFloat(c.Time, 64); err != nil || c.Classname == "" {
			t.Errorf("testcase %s: time %q, classname %q", c.Name, c.Time, c.Classname)
		}
		failed, errored := c.Failure != nil, c.Error != nil
		if failed != (want[c.Name] == "FAIL") || errored != (want[c.Name] == "error") {
			t.Errorf("testcase %s: failure %v, error %v; want %s", c.Name, failed, errored, want[c.Name])
		}
		if failed && c.Failure.Message == "" {
			t.Errorf("testcase %s: failure without a message", c.Name)
		}
	}

	out.Reset()
	if code := run(ctx, []string{"eval", "--json", "testdata/eval", "--parallel", "2"}, &out, &errb); code != 1 {
		t.Fatalf("eval --json: exit %d", code)
	}
	var res struct {
		Summary struct{ Total, Passed, Failed, Errors int }
		Results []struct {
			Name     string
			Passed   bool
			Failures []string
		}
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("eval --json: %v\n%s", err, out.String())
	}
	if res.Summary.Total != 6 || res.Summary.Passed != 3 || res.Summary.Failed != 2 || res.Summary.Errors != 1 || len(res.Results) != 6 {
		t.Fatalf("eval --json summary: %+v", res.Summary)
	}
}

// TestEval_FromExport makes a case of an exported generator chat in one
// command; the case passes against the workflow, and fails once the
// workflow's scripted model plans another workflow.
func TestEval_FromExport(t *testing.T) {
	dataDir := t.TempDir()
	chatID := recordGenerator(t, dataDir)
	ctx := context.Background()
	dir := t.TempDir()
	export := filepath.Join(dir, "chat.jsonl")
	cases := filepath.Join(dir, "cases")
	if err := os.Mkdir(cases, 0o755); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"export", chatID, "--data-dir", dataDir, "-o", export}, &out, &errb); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errb.String())
	}
	caseFile := filepath.Join(cases, "recorded.json")
	if code := run(ctx, []string{"eval", "--from-export", export, "-o", caseFile}, &out, &errb); code != 0 {
		t.Fatalf("eval --from-export: exit %d: %s", code, errb.String())
	}
	if b, _ := os.ReadFile(caseFile); bytes.Contains(b, []byte(secretCanary)) {
		t.Fatal("the case holds the secret")
	}
	wf := copyGenerator(t)
	out.Reset()
	if code := run(ctx, []string{"eval", cases, "--workflow", wf}, &out, &errb); code != 0 {
		t.Fatalf("eval of the recorded case: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "1 case: 1 passed, 0 failed, 0 errors") {
		t.Fatalf("eval output:\n%s", out.String())
	}
	editFile(t, filepath.Join(wf, "scripted.json"), `"name": "Weekly Newsletter"`, `"name": "Daily Digest"`)
	out.Reset()
	if code := run(ctx, []string{"eval", cases, "--workflow", wf}, &out, &errb); code != 1 {
		t.Fatalf("eval against a changed model: exit %d, want 1\n%s", code, out.String())
	}
	for _, s := range []string{"recorded  FAIL", `want "Weekly Newsletter", got "Daily Digest"`} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, out.String())
		}
	}
}
