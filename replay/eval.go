package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/chatlog"
)

// Case is one eval case: how to drive a chat, and what it must do. Its
// file is JSON (docs/replay.md has an example).
type Case struct {
	// Name names the case in reports; default: its file's name.
	Name string `json:"name,omitempty"`
	// Workflow is the built-in example the case runs when baton eval is
	// given no --workflow.
	Workflow string `json:"workflow,omitempty"`
	// Message and Context start the chat; Inputs are the person's, given
	// each time the chat waits (see Drive).
	Message string                     `json:"message,omitempty"`
	Context map[string]json.RawMessage `json:"context,omitempty"`
	Inputs  []chatlog.Input            `json:"inputs,omitempty"`
	Expect  Expect                     `json:"expect"`

	file string
}

// Expect is what a case's chat must do. Every field set is checked; an
// empty one is not.
type Expect struct {
	// Status is the chat's final status: completed, waiting_input,
	// waiting_ui_tool, waiting_secret, failed, cancelled.
	Status string `json:"status,omitempty"`
	// Speakers is the handoff path: the agents that took a turn (native
	// select_speaker), in order, exactly.
	Speakers []string `json:"speakers,omitempty"`
	// ToolCalls must appear among the chat's tool calls in this order
	// (others may come between): the name, the agent when given, and the
	// arguments matching the pattern (Match).
	ToolCalls []ToolCallExpect `json:"tool_calls,omitempty"`
	// StructuredOutputs must appear among the chat's structured outputs in
	// this order, their data matching the pattern.
	StructuredOutputs []StructuredExpect `json:"structured_outputs,omitempty"`
	// Texts must each be matched by some message of the agent (any agent
	// but the person when Agent is empty).
	Texts []TextExpect `json:"texts,omitempty"`
	// Context must match the chat's final context variables (Match).
	Context json.RawMessage `json:"context,omitempty"`
}

// ToolCallExpect is an expected tool call.
type ToolCallExpect struct {
	Name      string          `json:"name"`
	Agent     string          `json:"agent,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// StructuredExpect is an expected structured output.
type StructuredExpect struct {
	Agent string          `json:"agent"`
	Data  json.RawMessage `json:"data,omitempty"`
}

// TextExpect is an expected message: it contains Contains and matches the
// regular expression Matches (RE2 syntax), whichever are set.
type TextExpect struct {
	Agent    string `json:"agent,omitempty"`
	Contains string `json:"contains,omitempty"`
	Matches  string `json:"matches,omitempty"`
}

// Match reports whether got matches the JSON pattern want, a subset match:
// an object matches an object holding every key of the pattern with a
// matching value (other keys are ignored); an array matches an array of
// the same length whose elements match in order; a string, number,
// boolean or null matches an equal value (numbers by value). It returns
// the path of the first mismatch.
func Match(want, got json.RawMessage) (bool, string) {
	var w, g any
	if err := json.Unmarshal(want, &w); err != nil {
		return false, "pattern: not JSON"
	}
	if len(bytes.TrimSpace(got)) == 0 {
		got = json.RawMessage("null")
	}
	if err := json.Unmarshal(got, &g); err != nil {
		return false, "value: not JSON"
	}
	return match(w, g, "$")
}

func match(w, g any, path string) (bool, string) {
	switch wv := w.(type) {
	case map[string]any:
		gv, ok := g.(map[string]any)
		if !ok {
			return false, path + ": want an object"
		}
		for _, k := range sortedKeys(wv) {
			x, ok := gv[k]
			if !ok {
				return false, path + "." + k + ": missing"
			}
			if ok, p := match(wv[k], x, path+"."+k); !ok {
				return false, p
			}
		}
		return true, ""
	case []any:
		gv, ok := g.([]any)
		if !ok || len(gv) != len(wv) {
			return false, fmt.Sprintf("%s: want an array of %d", path, len(wv))
		}
		for i := range wv {
			if ok, p := match(wv[i], gv[i], fmt.Sprintf("%s[%d]", path, i)); !ok {
				return false, p
			}
		}
		return true, ""
	}
	if w != g {
		wb, _ := json.Marshal(w)
		gb, _ := json.Marshal(g)
		return false, fmt.Sprintf("%s: want %s, got %s", path, wb, clip(string(gb), 80))
	}
	return true, ""
}

// LoadCases reads the cases of dir: every *.json file in it, in name
// order. A case that does not decode is an error naming its file.
func LoadCases(dir string) ([]*Case, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, baton.Errorf(baton.EINVALID, "%s: no cases (*.json files)", dir)
	}
	sort.Strings(paths)
	cases := make([]*Case, 0, len(paths))
	for _, p := range paths {
		c, err := LoadCase(p)
		if err != nil {
			return nil, err
		}
		cases = append(cases, c)
	}
	return cases, nil
}

// LoadCase reads one case file.
func LoadCase(path string) (*Case, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c := &Case{}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line, col := baton.LineCol(b, max(se.Offset-1, 0))
			return nil, baton.Errorf(baton.EINVALID, "%s:%d:%d: malformed JSON: %v", path, line, col, se)
		}
		return nil, baton.Errorf(baton.EINVALID, "%s: %s", path, strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return nil, baton.Errorf(baton.EINVALID, "%s: unexpected data after the case", path)
	}
	if err := c.validate(); err != nil {
		return nil, baton.Errorf(baton.EINVALID, "%s: %v", path, err)
	}
	c.file = path
	if c.Name == "" {
		c.Name = strings.TrimSuffix(filepath.Base(path), ".json")
	}
	return c, nil
}

func (c *Case) validate() error {
	for i, in := range c.Inputs {
		if err := in.Validate(); err != nil {
			return fmt.Errorf("inputs[%d]: %v", i, err)
		}
	}
	for i, t := range c.Expect.Texts {
		if t.Matches != "" {
			if _, err := regexp.Compile(t.Matches); err != nil {
				return fmt.Errorf("expect.texts[%d].matches: %v", i, err)
			}
		}
		if t.Contains == "" && t.Matches == "" {
			return fmt.Errorf(`expect.texts[%d]: needs "contains" or "matches"`, i)
		}
	}
	for i, tc := range c.Expect.ToolCalls {
		if tc.Name == "" {
			return fmt.Errorf("expect.tool_calls[%d].name: required", i)
		}
		if len(tc.Arguments) > 0 && !json.Valid(tc.Arguments) {
			return fmt.Errorf("expect.tool_calls[%d].arguments: not JSON", i)
		}
	}
	for i, so := range c.Expect.StructuredOutputs {
		if len(so.Data) > 0 && !json.Valid(so.Data) {
			return fmt.Errorf("expect.structured_outputs[%d].data: not JSON", i)
		}
	}
	if s := c.Expect.Status; s != "" && !baton.ChatStatus(s).Valid() {
		return fmt.Errorf("expect.status: %q is not a chat status", s)
	}
	return nil
}

// Result is a case's verdict.
type Result struct {
	Name string `json:"name"`
	File string `json:"file"`
	// Passed is true when every expectation held. Failures say which did
	// not; Error, when set, says why the case could not run at all.
	Passed   bool          `json:"passed"`
	Failures []string      `json:"failures,omitempty"`
	Error    string        `json:"error,omitempty"`
	Duration time.Duration `json:"duration_ns"`
	ChatID   string        `json:"chat_id,omitempty"`
	Status   string        `json:"status,omitempty"`
}

// EvalOptions say how Eval runs cases.
type EvalOptions struct {
	// WorkflowDir is the workflow folder every case runs; empty means each
	// case's built-in example (Case.Workflow).
	WorkflowDir string
	// Model is ModelScripted (the default) or ModelLive.
	Model string
	// Parallel is how many cases run at once (default 4).
	Parallel int
	// Timeout bounds each case (default 2 minutes).
	Timeout time.Duration
	// Progress, when set, is called after each case with the count done.
	Progress func(done, total int, r *Result)
	Log      *slog.Logger
}

// Eval runs the cases, Parallel at a time, each in its own chat of one
// in-process runtime per workflow, and returns their results in the
// cases' order. An error means the runtime could not open.
func Eval(ctx context.Context, cases []*Case, o EvalOptions) ([]Result, error) {
	if o.Parallel < 1 {
		o.Parallel = 4
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	// One runtime per workflow the cases need.
	envs := map[string]*env{}
	envErrs := map[string]error{}
	defer func() {
		for _, e := range envs {
			e.close()
		}
	}()
	for _, c := range cases {
		key := c.Workflow
		if o.WorkflowDir != "" {
			key = ""
		}
		if _, ok := envs[key]; ok || envErrs[key] != nil {
			continue
		}
		if o.WorkflowDir == "" && c.Workflow == "" {
			continue // reported as the case's error
		}
		e, err := openEnv(ctx, envOptions{WorkflowDir: o.WorkflowDir, Name: key, Model: o.Model, Log: o.Log})
		if err != nil {
			if o.WorkflowDir != "" {
				return nil, err
			}
			envErrs[key] = err // the cases of that example report it
			continue
		}
		envs[key] = e
	}
	results := make([]Result, len(cases))
	sem := make(chan struct{}, o.Parallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for i, c := range cases {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				results[i] = Result{Name: c.Name, File: c.file, Error: ctx.Err().Error()}
				return
			}
			defer func() { <-sem }()
			key := c.Workflow
			if o.WorkflowDir != "" {
				key = ""
			}
			if err := envErrs[key]; err != nil {
				results[i] = Result{Name: c.Name, File: c.file, Error: err.Error()}
			} else {
				results[i] = runCase(ctx, envs[key], c, o.Timeout)
			}
			if o.Progress != nil {
				mu.Lock()
				done++
				o.Progress(done, len(cases), &results[i])
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return results, nil
}

// runCase drives one case's chat and checks its expectations.
func runCase(ctx context.Context, e *env, c *Case, timeout time.Duration) (r Result) {
	r = Result{Name: c.Name, File: c.file}
	start := time.Now()
	defer func() { r.Duration = time.Since(start) }()
	if e == nil {
		r.Error = `no workflow: give --workflow DIR, or name a built-in example in the case's "workflow"`
		return r
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := Drive(ctx, e.rt, baton.Scope{App: "eval", User: "eval"}, e.wf.Name, Script{Message: c.Message, Context: c.Context, Inputs: c.Inputs})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.ChatID, r.Status = out.ChatID, string(out.Chat.Status)
	r.Failures = Check(c.Expect, out)
	if out.Stuck != "" {
		r.Failures = append(r.Failures, "inputs: "+out.Stuck)
	} else if out.Used < len(c.Inputs) {
		r.Failures = append(r.Failures, fmt.Sprintf("inputs: the chat ended (%s) with %d of %d inputs given", out.Chat.Status, out.Used, len(c.Inputs)))
	}
	r.Passed = len(r.Failures) == 0
	return r
}

// Check returns every expectation of x the outcome does not meet.
func Check(x Expect, out *Outcome) []string {
	var fails []string
	if x.Status != "" && string(out.Chat.Status) != x.Status {
		fails = append(fails, fmt.Sprintf("status: want %s, got %s", x.Status, out.Chat.Status))
	}
	var speakers []string
	var calls []baton.ToolCallPayload
	var outputs []baton.StructuredOutputPayload
	var texts []baton.TextPayload
	for i := range out.Events {
		ev := &out.Events[i]
		switch ev.Type {
		case baton.TypeChatSelectSpeaker:
			if p, err := baton.DecodePayload[baton.SelectSpeakerPayload](ev); err == nil && !p.Synthetic {
				speakers = append(speakers, p.Agent)
			}
		case baton.TypeChatToolCall:
			if p, err := baton.DecodePayload[baton.ToolCallPayload](ev); err == nil {
				calls = append(calls, p)
			}
		case baton.TypeChatStructuredOutputReady:
			if p, err := baton.DecodePayload[baton.StructuredOutputPayload](ev); err == nil {
				outputs = append(outputs, p)
			}
		case baton.TypeChatText:
			if p, err := baton.DecodePayload[baton.TextPayload](ev); err == nil {
				texts = append(texts, p)
			}
		}
	}
	if x.Speakers != nil && !slices.Equal(x.Speakers, speakers) {
		fails = append(fails, fmt.Sprintf("speakers: want %s, got %s", strings.Join(x.Speakers, " → "), strings.Join(speakers, " → ")))
	}
	next := 0
	for i, want := range x.ToolCalls {
		found, why := false, "no call of "+want.Name
		for ; next < len(calls); next++ {
			got := calls[next]
			if got.ToolName != want.Name || want.Agent != "" && got.Agent != want.Agent {
				continue
			}
			if len(want.Arguments) > 0 {
				if ok, p := Match(want.Arguments, got.Arguments); !ok {
					why = "arguments " + p
					continue
				}
			}
			found = true
			next++
			break
		}
		if !found {
			fails = append(fails, fmt.Sprintf("tool_calls[%d] %s: %s (in order, after the calls matched before it)", i, want.Name, why))
			break
		}
	}
	next = 0
	for i, want := range x.StructuredOutputs {
		found, why := false, "no structured output of "+want.Agent
		for ; next < len(outputs); next++ {
			got := outputs[next]
			if want.Agent != "" && got.Agent != want.Agent {
				continue
			}
			if len(want.Data) > 0 {
				if ok, p := Match(want.Data, got.Data); !ok {
					why = "data " + p
					continue
				}
			}
			found = true
			next++
			break
		}
		if !found {
			fails = append(fails, fmt.Sprintf("structured_outputs[%d] %s: %s", i, want.Agent, why))
			break
		}
	}
	for i, want := range x.Texts {
		var re *regexp.Regexp
		if want.Matches != "" {
			re = regexp.MustCompile(want.Matches) // checked when the case was loaded
		}
		ok := slices.ContainsFunc(texts, func(t baton.TextPayload) bool {
			if want.Agent == "" && t.Agent == "user" || want.Agent != "" && t.Agent != want.Agent {
				return false
			}
			return (want.Contains == "" || strings.Contains(t.Content, want.Contains)) && (re == nil || re.MatchString(t.Content))
		})
		if !ok {
			who := want.Agent
			if who == "" {
				who = "any agent"
			}
			fails = append(fails, fmt.Sprintf("texts[%d]: no message of %s contains %q / matches %q", i, who, want.Contains, want.Matches))
		}
	}
	if len(x.Context) > 0 {
		var vars map[string]json.RawMessage
		_ = json.Unmarshal(out.Chat.Context, &vars)
		for k := range vars {
			if baton.IsReservedVariable(k) {
				delete(vars, k)
			}
		}
		got, _ := json.Marshal(vars)
		if ok, p := Match(x.Context, got); !ok {
			fails = append(fails, "context "+p)
		}
	}
	return fails
}

// CaseFromExport makes a case of a recorded chat: its start and inputs,
// and as expectations its final status, its speakers, the tool calls the
// model made with their arguments, its structured outputs and the context
// variables its events set. Secret form answers become placeholders.
func CaseFromExport(f *chatlog.File, name string) *Case {
	c := &Case{Name: name, Workflow: f.Header.Workflow}
	c.Message, c.Inputs = f.Inputs()
	evs := make([]baton.Event, len(f.Records))
	for i := range f.Records {
		evs[i] = f.Records[i].Event(f.Header.ChatID)
	}
	vars := map[string]json.RawMessage{}
	for i := range evs {
		ev := &evs[i]
		switch ev.Type {
		case baton.TypeChatSelectSpeaker:
			if p, err := baton.DecodePayload[baton.SelectSpeakerPayload](ev); err == nil && !p.Synthetic {
				c.Expect.Speakers = append(c.Expect.Speakers, p.Agent)
			}
		case baton.TypeChatToolCall:
			if p, err := baton.DecodePayload[baton.ToolCallPayload](ev); err == nil && p.LifecycleKey == "" {
				c.Expect.ToolCalls = append(c.Expect.ToolCalls, ToolCallExpect{Name: p.ToolName, Agent: p.Agent, Arguments: p.Arguments})
			}
		case baton.TypeChatStructuredOutputReady:
			if p, err := baton.DecodePayload[baton.StructuredOutputPayload](ev); err == nil {
				c.Expect.StructuredOutputs = append(c.Expect.StructuredOutputs, StructuredExpect{Agent: p.Agent, Data: p.Data})
			}
		case baton.TypeChatContextUpdated:
			if p, err := baton.DecodePayload[baton.ContextUpdatedPayload](ev); err == nil {
				for k, v := range p.Variables {
					if !baton.IsReservedVariable(k) {
						vars[k] = v
					}
				}
			}
		}
	}
	c.Expect.Status = f.Header.Status
	if len(vars) > 0 {
		c.Expect.Context, _ = json.Marshal(vars)
	}
	return c
}

// Summary counts results.
type Summary struct {
	Total, Passed, Failed, Errors int
	Duration                      time.Duration
}

// Summarize counts the results.
func Summarize(rs []Result) Summary {
	var s Summary
	for _, r := range rs {
		s.Total++
		s.Duration += r.Duration
		switch {
		case r.Error != "":
			s.Errors++
		case r.Passed:
			s.Passed++
		default:
			s.Failed++
		}
	}
	return s
}

// WriteTable prints the results as a table and the summary line.
func WriteTable(w io.Writer, rs []Result) {
	width := len("case")
	for _, r := range rs {
		width = max(width, len(r.Name))
	}
	fmt.Fprintf(w, "%-*s  %-6s  %8s  %s\n", width, "case", "result", "time", "detail")
	for _, r := range rs {
		verdict, detail := "pass", ""
		switch {
		case r.Error != "":
			verdict, detail = "error", r.Error
		case !r.Passed:
			verdict, detail = "FAIL", strings.Join(r.Failures, "; ")
		}
		fmt.Fprintf(w, "%-*s  %-6s  %7.2fs  %s\n", width, r.Name, verdict, r.Duration.Seconds(), detail)
	}
	s := Summarize(rs)
	fmt.Fprintf(w, "\n%s: %d passed, %d failed, %d errors\n", plural(s.Total, "case"), s.Passed, s.Failed, s.Errors)
}

// JUnit XML, in the shape CI systems read (the de facto JUnit schema:
// testsuites > testsuite > testcase with failure or error).
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name      string      `xml:"name,attr"`
	Tests     int         `xml:"tests,attr"`
	Failures  int         `xml:"failures,attr"`
	Errors    int         `xml:"errors,attr"`
	Skipped   int         `xml:"skipped,attr"`
	Time      string      `xml:"time,attr"`
	Timestamp string      `xml:"timestamp,attr"`
	Cases     []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	File      string        `xml:"file,attr,omitempty"`
	Failure   *junitProblem `xml:"failure,omitempty"`
	Error     *junitProblem `xml:"error,omitempty"`
}

type junitProblem struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// WriteJUnit writes the results as JUnit XML, one testsuite named suite.
func WriteJUnit(w io.Writer, suite string, rs []Result, at time.Time) error {
	s := Summarize(rs)
	secs := func(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }
	js := junitSuite{Name: suite, Tests: s.Total, Failures: s.Failed, Errors: s.Errors, Time: secs(s.Duration), Timestamp: at.UTC().Format("2006-01-02T15:04:05")}
	for _, r := range rs {
		jc := junitCase{Name: r.Name, Classname: suite, Time: secs(r.Duration), File: r.File}
		switch {
		case r.Error != "":
			jc.Error = &junitProblem{Message: clip(r.Error, 200), Type: "error", Text: r.Error}
		case !r.Passed:
			jc.Failure = &junitProblem{Message: clip(r.Failures[0], 200), Type: "expectation", Text: strings.Join(r.Failures, "\n")}
		}
		js.Cases = append(js.Cases, jc)
	}
	doc := junitSuites{Name: suite, Tests: s.Total, Failures: s.Failed, Errors: s.Errors, Time: secs(s.Duration), Suites: []junitSuite{js}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// plural returns "1 case", "2 cases".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
