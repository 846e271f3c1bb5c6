package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/batonhq/baton/internal/suggest"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/batonhq/baton"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// fileOrder is the order files are read and errors are sorted in.
var fileOrder = []string{FileWorkflow, FileAgents, FileHandoffs, FileTools, FileContextVariables, FileStructuredOutputs}

// requiredFiles must exist; the others default to empty.
var requiredFiles = map[string]bool{FileWorkflow: true, FileAgents: true}

type agentsFile struct {
	Agents map[string]*Agent `json:"agents"`
}

type handoffsFile struct {
	HandoffRules []*HandoffRule `json:"handoff_rules"`
}

type toolsFile struct {
	Tools []*Tool `json:"tools"`
}

type contextFile struct {
	Variables        map[string]*Variable `json:"variables"`
	DerivedVariables []*DerivedVariable   `json:"derived_variables"`
}

type structuredFile struct {
	StructuredOutputs struct {
		Models   map[string]*Model `json:"models"`
		Registry map[string]string `json:"registry"`
	} `json:"structured_outputs"`
}

// LoadAll loads every folder at the root of fsys that holds a workflow.json,
// in name order. It returns the workflows that are valid and, when any is
// not, a ValidationErrors listing the mistakes of all of them.
func LoadAll(fsys fs.FS) ([]*Workflow, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("workflow: list workflows: %w", err)
	}
	var out []*Workflow
	var all ValidationErrors
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if _, err := fs.Stat(fsys, path.Join(e.Name(), FileWorkflow)); err != nil {
			continue
		}
		w, err := Load(fsys, e.Name())
		if err != nil {
			var ve ValidationErrors
			if !errors.As(err, &ve) {
				return out, err
			}
			all = append(all, ve...)
			continue
		}
		out = append(out, w)
	}
	if len(all) > 0 {
		return out, all
	}
	return out, nil
}

// Load reads and validates the workflow in folder dir of fsys. The error,
// when the folder has mistakes, is a ValidationErrors naming every one; any
// other error means the folder could not be read.
func Load(fsys fs.FS, dir string) (*Workflow, error) {
	dir = path.Clean(dir)
	l := newLoader(&Workflow{Dir: dir, FS: fsys, Name: path.Base(dir)}, dir)
	if dir == "." {
		l.w.Name = ""
	}
	if err := l.read(); err != nil {
		return nil, err
	}
	return l.finish()
}

func newLoader(w *Workflow, prefix string) *loader {
	if prefix == "." {
		prefix = ""
	}
	return &loader{w: w, prefix: prefix, files: map[string]*file{}, broken: map[string]bool{}}
}

// finish validates what read (or Build) collected: the one validation path
// of a workflow, whether it comes from JSON files or from Go values.
func (l *loader) finish() (*Workflow, error) {
	l.validate()
	if len(l.errs) > 0 {
		l.sortErrors()
		return nil, l.errs
	}
	return l.w, nil
}

type loader struct {
	w     *Workflow
	files map[string]*file
	errs  ValidationErrors
	// prefix is the folder error file names start with ("" for none).
	prefix string

	// The entries of the JSON objects keyed by name, in file order (or in
	// a Definition's order), with their names set: what validate reads.
	agents    []*Agent
	variables []*Variable
	models    []*Model
	registry  []string // keys of structured_outputs.registry

	// broken holds the files that could not be parsed; references into
	// them are not checked, so one syntax error does not bury the rest.
	broken map[string]bool

	agentsF     agentsFile
	handoffsF   handoffsFile
	toolsF      toolsFile
	contextF    contextFile
	structuredF structuredFile
}

// errorf records a mistake at path in the file called name.
func (l *loader) errorf(name, p, format string, args ...any) {
	fe := &FieldError{File: l.fileName(name), Path: p, Message: fmt.Sprintf(format, args...)}
	if f := l.files[name]; f != nil {
		fe.Line, fe.Col = f.lineCol(p)
	}
	l.errs = append(l.errs, fe)
}

// conditionError reports a condition that does not compile at the column
// of handoffs.json it is about.
func (l *loader) conditionError(p string, err error) {
	l.errorf(FileHandoffs, p, "%v", err)
	fe := l.errs[len(l.errs)-1]
	fe.Err = err
	var ce *ConditionError
	if f := l.files[FileHandoffs]; f != nil && errors.As(err, &ce) && ce.Column > 0 {
		if line, col, ok := f.stringLineCol(p, ce.Column-1); ok {
			fe.Line, fe.Col = line, col
		}
	}
}

func (l *loader) fileName(name string) string {
	if l.prefix == "" {
		return name
	}
	return path.Join(l.prefix, name)
}

func (l *loader) sortErrors() {
	rank := func(file string) int { return slices.Index(fileOrder, path.Base(file)) }
	sort.SliceStable(l.errs, func(i, j int) bool {
		a, b := l.errs[i], l.errs[j]
		if ra, rb := rank(a.File), rank(b.File); ra != rb {
			return ra < rb
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
}

// read reads, parses and decodes the six files, recording syntax, type and
// unknown-field mistakes.
func (l *loader) read() error {
	targets := map[string]any{
		FileWorkflow:          &l.w.Config,
		FileAgents:            &l.agentsF,
		FileHandoffs:          &l.handoffsF,
		FileTools:             &l.toolsF,
		FileContextVariables:  &l.contextF,
		FileStructuredOutputs: &l.structuredF,
	}
	for _, name := range fileOrder {
		data, err := readFile(l.w.FS, path.Join(l.w.Dir, name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if requiredFiles[name] {
				l.errorf(name, "", "missing file")
				l.broken[name] = true
			}
			continue
		case errors.Is(err, errTooLarge):
			l.errorf(name, "", "larger than %d MiB", maxFileSize>>20)
			l.broken[name] = true
			continue
		case err != nil:
			return fmt.Errorf("workflow %s: read %s: %w", l.w.Dir, name, err)
		}
		f, ferr := parse(l.fileName(name), data)
		if ferr != nil {
			l.errs = append(l.errs, ferr)
			l.broken[name] = true
			continue
		}
		l.files[name] = f
		target := targets[name]
		f.check(f.root, reflect.TypeOf(target).Elem(), "", func(p, msg string) { l.errorf(name, p, "%s", msg) })
		// Unknown fields are ignored here (they were reported above) and a
		// value of the wrong type leaves its field zero: decoding goes on so
		// that the rest of the workflow is still checked.
		_ = json.Unmarshal(data, target)
	}
	l.collect()
	return nil
}

// collect lists the entries of the files' name-keyed objects (agents,
// variables, models and their fields, the registry) in file order; a null
// entry is a mistake.
func (l *loader) collect() {
	if f := l.files[FileAgents]; f != nil {
		for _, name := range f.root.objectKeys("agents") {
			a := l.agentsF.Agents[name]
			if a == nil {
				l.errorf(FileAgents, "agents."+name, "must be an object, not null")
				continue
			}
			a.Name = name
			l.agents = append(l.agents, a)
		}
	}
	if f := l.files[FileContextVariables]; f != nil {
		for _, name := range f.root.objectKeys("variables") {
			v := l.contextF.Variables[name]
			if v == nil {
				l.errorf(FileContextVariables, "variables."+name, "must be an object, not null")
				continue
			}
			v.Name = name
			l.variables = append(l.variables, v)
		}
	}
	if f := l.files[FileStructuredOutputs]; f != nil {
		for _, name := range f.root.objectKeys("structured_outputs", "models") {
			m := l.structuredF.StructuredOutputs.Models[name]
			if m == nil {
				l.errorf(FileStructuredOutputs, "structured_outputs.models."+name, "must be an object, not null")
				continue
			}
			m.Name = name
			m.FieldOrder = slices.Clone(f.root.objectKeys("structured_outputs", "models", name, "fields"))
			l.models = append(l.models, m)
		}
		l.registry = f.root.objectKeys("structured_outputs", "registry")
	}
}

var errTooLarge = errors.New("file too large")

func readFile(fsys fs.FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return nil, fmt.Errorf("%s is a directory", name)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileSize {
		return nil, errTooLarge
	}
	return data, nil
}

var (
	agentNameRe = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,51}$`)
	toolNameRe  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	envNameRe   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func oneOf(v string, allowed ...string) bool { return slices.Contains(allowed, v) }

func list(allowed ...string) string { return strings.Join(allowed, ", ") }

// validate checks the decoded files as a whole.
func (l *loader) validate() {
	w := l.w
	l.indexAgents()
	l.indexModels()
	l.indexTools()
	l.declareVariables()

	l.checkConfig()
	l.checkAgents()
	l.checkHandoffs()
	l.checkTools()
	l.checkDerived()
	l.checkModels()
	l.bindAgents()
	if len(l.errs) == 0 {
		l.checkReachability()
		l.checkAfterWorkCycles()
	}
	if len(l.errs) == 0 {
		if err := w.compileModels(); err != nil {
			l.errorf(FileStructuredOutputs, "structured_outputs.models", "%v", err)
		}
	}
}

func (l *loader) indexAgents() {
	w := l.w
	w.agents = map[string]*Agent{}
	for _, a := range l.agents {
		name := a.Name
		p := "agents." + name
		switch {
		case name == UserAgent:
			l.errorf(FileAgents, p, "%q is reserved for the person", UserAgent)
		case !agentNameRe.MatchString(name):
			l.errorf(FileAgents, p, "agent name must start with a letter and hold only letters, digits, '_' and '-' (at most 52)")
		case w.agents[name] != nil: // only a Definition can repeat a name
			l.errorf(FileAgents, p, "duplicate agent name %q", name)
			continue
		}
		w.agents[name] = a
		w.Agents = append(w.Agents, a)
	}
	if len(w.Agents) == 0 && !l.broken[FileAgents] {
		l.errorf(FileAgents, "agents", "a workflow needs at least one agent")
	}
}

func (l *loader) indexModels() {
	w := l.w
	w.models = map[string]*Model{}
	w.Registry = map[string]string{}
	for _, m := range l.models {
		name := m.Name
		p := "structured_outputs.models." + name
		switch {
		case !identRe.MatchString(name):
			l.errorf(FileStructuredOutputs, p, "model name must be an identifier (letters, digits and '_')")
		case w.models[name] != nil: // only a Definition can repeat a name
			l.errorf(FileStructuredOutputs, p, "duplicate model name %q", name)
			continue
		}
		w.models[name] = m
		w.Models = append(w.Models, m)
	}
	for agent, model := range l.structuredF.StructuredOutputs.Registry {
		w.Registry[agent] = model
	}
}

func (l *loader) indexTools() {
	w := l.w
	w.tools = map[string]*Tool{}
	first := map[string]int{}
	for i, t := range l.toolsF.Tools {
		p := fmt.Sprintf("tools[%d]", i)
		if t == nil {
			l.errorf(FileTools, p, "must be an object, not null")
			continue
		}
		t.Index = i
		if t.Name == "" {
			t.Name = t.Function
		}
		w.Tools = append(w.Tools, t)
		if t.Name == "" {
			continue // reported by checkTools
		}
		if j, dup := first[t.Name]; dup {
			l.errorf(FileTools, p+".name", "duplicate tool name %q (also tools[%d])", t.Name, j)
			continue
		}
		first[t.Name] = i
		w.tools[t.Name] = t
	}
}

// declareVariables records the type of every context variable, so that
// conditions and templates can be checked.
func (l *loader) declareVariables() {
	w := l.w
	w.varTypes = map[string]string{}
	for _, v := range l.variables {
		name := v.Name
		p := "variables." + name
		if _, dup := w.varTypes[name]; dup { // only a Definition can repeat a name
			l.errorf(FileContextVariables, p, "%q is declared twice", name)
			continue
		}
		w.Variables = append(w.Variables, v)
		if !identRe.MatchString(name) || exprReserved[name] {
			l.errorf(FileContextVariables, p, "variable name must be an identifier (letters, digits and '_') and not a reserved word")
		}
		if !oneOf(v.Type, TypeBool, TypeInt, TypeFloat, TypeStr, TypeList, TypeDict) {
			l.errorf(FileContextVariables, p+".type", "%q is not one of %s", v.Type, list(TypeBool, TypeInt, TypeFloat, TypeStr, TypeList, TypeDict))
		} else if v.Default != nil && !valueHasType(v.Default, v.Type) {
			l.errorf(FileContextVariables, p+".default", "must be %s %s (or null)", article(v.Type), v.Type)
		}
		if v.FromEnv != "" {
			l.errorf(FileContextVariables, p+".from_env", "no longer supported: a context variable is shown to the chat's model and client, and must not come from baton's environment; set default")
		}
		w.varTypes[name] = v.Type
	}
	for i, d := range l.contextF.DerivedVariables {
		p := fmt.Sprintf("derived_variables[%d]", i)
		if d == nil {
			l.errorf(FileContextVariables, p, "must be an object, not null")
			continue
		}
		w.DerivedVariables = append(w.DerivedVariables, d)
		switch {
		case d.Name == "":
			l.errorf(FileContextVariables, p+".name", "required")
			continue
		case !identRe.MatchString(d.Name) || exprReserved[d.Name]:
			l.errorf(FileContextVariables, p+".name", "variable name must be an identifier (letters, digits and '_') and not a reserved word")
		}
		if _, dup := w.varTypes[d.Name]; dup {
			l.errorf(FileContextVariables, p+".name", "%q is declared twice", d.Name)
			continue
		}
		switch d.TriggerType {
		case StructuredOutputField:
			w.varTypes[d.Name] = TypeAny // refined by checkDerived
		case AgentTextPrefix:
			w.varTypes[d.Name] = TypeStr
		default:
			w.varTypes[d.Name] = TypeBool
		}
	}
}

func valueHasType(v any, t string) bool {
	switch t {
	case TypeBool:
		_, ok := v.(bool)
		return ok
	case TypeInt:
		f, ok := v.(float64)
		return ok && f == float64(int64(f))
	case TypeFloat:
		_, ok := v.(float64)
		return ok
	case TypeStr:
		_, ok := v.(string)
		return ok
	case TypeList:
		_, ok := v.([]any)
		return ok
	case TypeDict:
		_, ok := v.(map[string]any)
		return ok
	}
	return true
}

func (l *loader) unknownAgent(file, p, name string) {
	if l.broken[FileAgents] {
		return
	}
	l.errorf(file, p, "unknown agent %q%s", name, l.agentHint(name))
}

// agentHint suggests a close agent name.
func (l *loader) agentHint(name string) string {
	best, bestD := "", len(name)/3+2
	for _, a := range l.w.Agents {
		if d := suggest.Distance(strings.ToLower(name), strings.ToLower(a.Name)); d < bestD {
			best, bestD = a.Name, d
		}
	}
	if best == "" {
		return ""
	}
	return " (did you mean " + best + "?)"
}

func (l *loader) checkLLM(file, p string, c *LLMConfig) {
	if c == nil {
		return
	}
	if c.Temperature != nil && (*c.Temperature < 0 || *c.Temperature > 2) {
		l.errorf(file, p+".temperature", "must be between 0 and 2")
	}
	if c.MaxTokens < 0 {
		l.errorf(file, p+".max_tokens", "must not be negative")
	}
	if c.TimeoutSeconds < 0 {
		l.errorf(file, p+".timeout_seconds", "must not be negative")
	}
	if c.FirstTokenTimeoutSeconds < 0 {
		l.errorf(file, p+".first_token_timeout_seconds", "must not be negative")
	}
	if c.IdleTimeoutSeconds < 0 {
		l.errorf(file, p+".idle_timeout_seconds", "must not be negative")
	}
	if c.BaseURLEnv != "" && !envNameRe.MatchString(c.BaseURLEnv) {
		l.errorf(file, p+".base_url_env", "%q is not an environment variable name", c.BaseURLEnv)
	}
	if c.APIKeyEnv != "" && !envNameRe.MatchString(c.APIKeyEnv) {
		l.errorf(file, p+".api_key_env", "%q is not an environment variable name", c.APIKeyEnv)
	}
	l.checkEnvName(file, p+".base_url_env", c.BaseURLEnv)
	l.checkEnvName(file, p+".api_key_env", c.APIKeyEnv)
}

func (l *loader) checkConfig() {
	w := l.w
	if l.broken[FileWorkflow] {
		return
	}
	c := &w.Config
	switch {
	case c.Name == "" && w.Name == "":
		l.errorf(FileWorkflow, "name", "required")
	case c.Name != "" && w.Name != "" && c.Name != w.Name:
		l.errorf(FileWorkflow, "name", "%q does not match the folder name %q", c.Name, w.Name)
	case w.Name == "":
		w.Name = c.Name
	}
	if c.Name == "" {
		c.Name = w.Name
	}
	for i, v := range c.VisualAgents {
		if w.agents[v] == nil {
			l.unknownAgent(FileWorkflow, fmt.Sprintf("visual_agents[%d]", i), v)
		}
	}
	o := &c.Orchestration
	switch {
	case o.InitialAgent == "":
		l.errorf(FileWorkflow, "orchestration.initial_agent", "required")
	case w.agents[o.InitialAgent] == nil:
		l.unknownAgent(FileWorkflow, "orchestration.initial_agent", o.InitialAgent)
	}
	if o.StartupMode == "" {
		o.StartupMode = AgentDriven
	} else if !oneOf(o.StartupMode, AgentDriven, UserDriven) {
		l.errorf(FileWorkflow, "orchestration.startup_mode", "%q is not one of %s", o.StartupMode, list(AgentDriven, UserDriven))
	}
	if o.MaxTurns < 0 {
		l.errorf(FileWorkflow, "orchestration.max_turns", "must not be negative")
	}
	if c.DoubleTexting != "" && !oneOf(c.DoubleTexting, DoubleTextingEnqueue, DoubleTextingReject, DoubleTextingInterrupt) {
		l.errorf(FileWorkflow, "double_texting", "%q is not one of %s", c.DoubleTexting, list(DoubleTextingEnqueue, DoubleTextingReject, DoubleTextingInterrupt))
	}
	l.checkLLM(FileWorkflow, "llm", &c.LLM)
	for model, p := range c.Pricing {
		if !validPrice(p.Input) || !validPrice(p.Output) || !validPrice(p.CachedInput) {
			l.errorf(FileWorkflow, "pricing."+model, "prices must be numbers from 0 to %.0f (US dollars per million tokens)", maxPrice)
		}
	}
	if c.Budget.MaxTokens < 0 {
		l.errorf(FileWorkflow, "budget.max_tokens", "must not be negative")
	}
	if c.Budget.MaxCostUSD < 0 {
		l.errorf(FileWorkflow, "budget.max_cost_usd", "must not be negative")
	}
	for name, s := range c.MCPServers {
		p := "mcp_servers." + name
		switch {
		case s.Command == "" && s.URL == "":
			l.errorf(FileWorkflow, p, "set command (stdio) or url (streamable HTTP)")
		case s.Command != "" && s.URL != "":
			l.errorf(FileWorkflow, p, "set command or url, not both")
		case s.URL != "" && !isHTTPURL(s.URL):
			l.errorf(FileWorkflow, p+".url", "%q is not an http or https URL", s.URL)
		case s.Command != "":
			l.checkMCPCommand(p+".command", s.Command)
		}
		if s.AllowPrivateNetwork && s.URL == "" {
			l.errorf(FileWorkflow, p+".allow_private_network", "only a url server has allow_private_network")
		}
		for k, v := range s.Env {
			if !envNameRe.MatchString(k) {
				l.errorf(FileWorkflow, p+".env."+k, "%q is not an environment variable name", k)
			}
			l.checkEnvRefs(FileWorkflow, p+".env."+k, v)
		}
		for h, v := range s.Headers {
			l.checkEnvRefs(FileWorkflow, p+".headers."+h, v)
		}
		l.checkEnvRefs(FileWorkflow, p+".url", s.URL)
		for h, env := range s.HeadersFromEnv {
			if !envNameRe.MatchString(env) {
				l.errorf(FileWorkflow, p+".headers_from_env."+h, "%q is not an environment variable name", env)
			}
			l.checkEnvName(FileWorkflow, p+".headers_from_env."+h, env)
		}
	}
}

// isHTTPURL reports whether s is an http or https URL. A URL with ${VAR}
// references (expanded by the tool registry) only needs to start with the
// scheme or with a reference.
func isHTTPURL(s string) bool {
	if strings.Contains(s, "${") {
		return strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://") || strings.HasPrefix(s, "${")
	}
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

func (l *loader) checkAgents() {
	w := l.w
	for _, a := range w.Agents {
		p := "agents." + a.Name
		segs, names, err := parseTemplate(a.SystemMessage)
		if err != nil {
			l.errorf(FileAgents, p+".system_message", "%v", err)
		}
		a.template = segs
		for _, n := range names {
			if _, ok := w.varTypes[n]; !ok && !l.broken[FileContextVariables] {
				l.errorf(FileAgents, p+".system_message", "unknown variable ${%s} (declare it in context_variables.json)", n)
			}
		}
		if a.MaxConsecutiveAutoReply < 0 {
			l.errorf(FileAgents, p+".max_consecutive_auto_reply", "must not be negative")
		}
		l.checkLLM(FileAgents, p+".llm", a.LLM)
		for i, t := range a.Tools {
			if l.broken[FileTools] {
				break
			}
			if w.tools[t] == nil {
				l.errorf(FileAgents, fmt.Sprintf("%s.tools[%d]", p, i), "unknown tool %q", t)
			} else if w.tools[t].ToolType == LifecycleTool {
				l.errorf(FileAgents, fmt.Sprintf("%s.tools[%d]", p, i), "%q is a Lifecycle_Tool; the runtime calls it, not the model", t)
			}
		}
		l.checkClientTools(a, p)
		_, registered := w.Registry[a.Name]
		registered = registered || l.broken[FileStructuredOutputs]
		if a.AutoToolMode {
			if !registered {
				l.errorf(FileAgents, p+".auto_tool_mode", "no structured-output model is registered for %s in structured_outputs.json", a.Name)
			}
			if !l.broken[FileTools] && !slices.ContainsFunc(w.Tools, func(t *Tool) bool { return t.Agent == a.Name && t.ToolType == UITool }) {
				l.errorf(FileAgents, p+".auto_tool_mode", "%s has no UI_Tool in tools.json for the runtime to invoke", a.Name)
			}
		}
		if a.StructuredOutputsRequired && !registered {
			l.errorf(FileAgents, p+".structured_outputs_required", "no structured-output model is registered for %s in structured_outputs.json", a.Name)
		}
	}
}

// checkClientTools checks an agent's client_tools: ["*"], or names a
// client may offer, each a valid tool name that is not the workflow's (a
// client's tool never shadows one).
func (l *loader) checkClientTools(a *Agent, p string) {
	seen := map[string]bool{}
	for i, n := range a.ClientTools {
		f := fmt.Sprintf("%s.client_tools[%d]", p, i)
		switch {
		case n == AnyClientTool && len(a.ClientTools) > 1:
			l.errorf(FileAgents, f, `"*" (any tool the client offers) must be the only entry`)
		case n == AnyClientTool:
		case !toolNameRe.MatchString(n):
			l.errorf(FileAgents, f, "%q must be 1 to 64 letters, digits, '_' or '-' (or \"*\" for any)", n)
		case strings.HasPrefix(n, "transfer_to_") || n == "terminate_chat":
			l.errorf(FileAgents, f, "%q is reserved for llm handoffs", n)
		case !l.broken[FileTools] && l.w.tools[n] != nil:
			l.errorf(FileAgents, f, "%q is a tool of tools.json; a client's tool may not take its name", n)
		case seen[n]:
			l.errorf(FileAgents, f, "%q is listed twice", n)
		}
		seen[n] = true
	}
}

func (l *loader) checkHandoffs() {
	w := l.w
	w.rules = map[string][]*HandoffRule{}
	afterWork := map[string]int{}
	transfers := map[string]int{}
	for i, r := range l.handoffsF.HandoffRules {
		p := fmt.Sprintf("handoff_rules[%d]", i)
		if r == nil {
			l.errorf(FileHandoffs, p, "must be an object, not null")
			continue
		}
		r.Index = i
		w.Handoffs = append(w.Handoffs, r)
		switch {
		case r.SourceAgent == "":
			l.errorf(FileHandoffs, p+".source_agent", "required")
		case r.SourceAgent != UserAgent && w.agents[r.SourceAgent] == nil:
			l.unknownAgent(FileHandoffs, p+".source_agent", r.SourceAgent)
		}
		switch {
		case r.HandoffType == "":
			l.errorf(FileHandoffs, p+".handoff_type", "required (one of %s)", list(HandoffAfterWork, HandoffCondition, HandoffLLM))
		case !oneOf(r.HandoffType, HandoffAfterWork, HandoffCondition, HandoffLLM):
			l.errorf(FileHandoffs, p+".handoff_type", "%q is not one of %s", r.HandoffType, list(HandoffAfterWork, HandoffCondition, HandoffLLM))
		}
		if r.TransitionTarget == "" && r.TargetAgent != "" {
			r.TransitionTarget = AgentTarget
		}
		switch {
		case r.TransitionTarget == "":
			l.errorf(FileHandoffs, p+".transition_target", "required (one of %s)", list(AgentTarget, TerminateTarget, RevertToUserTarget))
		case !oneOf(r.TransitionTarget, AgentTarget, TerminateTarget, RevertToUserTarget):
			l.errorf(FileHandoffs, p+".transition_target", "%q is not one of %s", r.TransitionTarget, list(AgentTarget, TerminateTarget, RevertToUserTarget))
		case r.TransitionTarget == AgentTarget && r.TargetAgent == "":
			l.errorf(FileHandoffs, p+".target_agent", "required for an AgentTarget")
		case r.TransitionTarget == AgentTarget && r.TargetAgent == UserAgent:
			l.errorf(FileHandoffs, p+".target_agent", "hand off to the person with transition_target RevertToUserTarget")
		case r.TransitionTarget == AgentTarget && w.agents[r.TargetAgent] == nil:
			l.unknownAgent(FileHandoffs, p+".target_agent", r.TargetAgent)
		case r.TransitionTarget != AgentTarget && r.TargetAgent != "":
			l.errorf(FileHandoffs, p+".target_agent", "must be empty for a %s", r.TransitionTarget)
		}
		if r.HandoffType == HandoffCondition && strings.TrimSpace(r.Condition) == "" {
			l.errorf(FileHandoffs, p+".condition", "required for a condition rule")
		}
		if strings.TrimSpace(r.Condition) != "" {
			c, err := CompileCondition(r.Condition, w.varTypes)
			if err != nil && !l.broken[FileContextVariables] {
				l.conditionError(p+".condition", err)
			}
			r.Compiled = c
		}
		if r.HandoffType == HandoffLLM {
			if r.SourceAgent == UserAgent {
				l.errorf(FileHandoffs, p+".handoff_type", "an llm rule needs an agent as source; the person has no model")
			}
			if strings.TrimSpace(r.Description) == "" {
				l.errorf(FileHandoffs, p+".description", "required for an llm rule (it describes the transfer tool to the model)")
			}
			key := r.SourceAgent + "\x00" + r.TransferToolName()
			if j, dup := transfers[key]; dup {
				l.errorf(FileHandoffs, p, "duplicate transfer tool %s for %s (also handoff_rules[%d])", r.TransferToolName(), r.SourceAgent, j)
			} else {
				transfers[key] = i
			}
		}
		if r.HandoffType == HandoffAfterWork && r.Condition == "" {
			if j, dup := afterWork[r.SourceAgent]; dup {
				l.errorf(FileHandoffs, p, "%s already has an unconditional after_work rule (handoff_rules[%d]); this one never fires", r.SourceAgent, j)
			} else {
				afterWork[r.SourceAgent] = i
			}
		}
		w.rules[r.SourceAgent] = append(w.rules[r.SourceAgent], r)
	}
}

// toolKinds are the kinds a tool may be of.
var toolKinds = []string{KindGo, KindCommand, KindHTTP, KindMCP, KindUI, KindA2A}

// checkTools validates every tool: the checks every tool shares, then the
// fields of its own kind through checkToolKind, then the fields that belong
// to some other kind. The order of the checks is the order of the messages,
// which the golden files under testdata/invalid pin.
func (l *loader) checkTools() {
	for _, t := range l.w.Tools {
		l.checkTool(t, fmt.Sprintf("tools[%d]", t.Index))
	}
	for _, t := range l.w.Tools {
		switch {
		case t != nil && t.Kind == KindHTTP:
			l.checkSecretHost(t.URL, fmt.Sprintf("tools[%d].url", t.Index))
		case t != nil && t.Kind == KindA2A && t.A2A != nil:
			l.checkSecretHost(t.A2A.CardURL, fmt.Sprintf("tools[%d].a2a.card_url", t.Index))
		}
	}
}

// checkTool validates the tool at path p.
func (l *loader) checkTool(t *Tool, p string) {
	l.checkToolName(t, p)
	l.checkToolType(t, p)
	l.checkToolAgent(t, p)
	l.checkToolTrigger(t, p)
	l.checkToolUI(t, p)
	l.checkToolKind(t, p)
	l.checkForeignFields(t, p)
	if t.TimeoutSeconds < 0 {
		l.errorf(FileTools, p+".timeout_seconds", "must not be negative")
	}
	if t.MaxConcurrency < 0 {
		l.errorf(FileTools, p+".max_concurrency", "must not be negative")
	}
	// Parameters and fixed arguments.
	if len(t.Parameters) > 0 && string(t.Parameters) != "null" {
		if t.Kind == KindMCP {
			l.errorf(FileTools, p+".parameters", "an mcp tool takes its parameters from the server")
		} else {
			l.checkParameters(t, p)
		}
	}
	l.checkSecretForm(t, p)
}

// checkToolName checks the tool's name (an mcp tool may have none: it
// takes its tools' names from the server).
func (l *loader) checkToolName(t *Tool, p string) {
	switch {
	case t.Name == "" && t.Kind != KindMCP:
		l.errorf(FileTools, p+".name", "required (or function)")
	case t.Name != "" && !toolNameRe.MatchString(t.Name):
		l.errorf(FileTools, p+".name", "%q must be 1 to 64 letters, digits, '_' or '-'", t.Name)
	case strings.HasPrefix(t.Name, "transfer_to_") || t.Name == "terminate_chat":
		l.errorf(FileTools, p+".name", "%q is reserved for llm handoffs", t.Name)
	}
}

// checkToolType checks tool_type and kind and how they fit together; a
// UI_Tool without a kind is of kind ui.
func (l *loader) checkToolType(t *Tool, p string) {
	if !oneOf(t.ToolType, AgentTool, UITool, LifecycleTool) {
		if t.ToolType == "" {
			l.errorf(FileTools, p+".tool_type", "required (one of %s)", list(AgentTool, UITool, LifecycleTool))
		} else {
			l.errorf(FileTools, p+".tool_type", "%q is not one of %s", t.ToolType, list(AgentTool, UITool, LifecycleTool))
		}
	}
	if t.Kind == "" && t.ToolType == UITool {
		t.Kind = KindUI
	}
	switch {
	case t.Kind == "":
		l.errorf(FileTools, p+".kind", "required (one of %s)", list(toolKinds...))
	case !oneOf(t.Kind, toolKinds...):
		l.errorf(FileTools, p+".kind", "%q is not one of %s", t.Kind, list(toolKinds...))
	case t.ToolType == UITool && t.Kind != KindUI:
		l.errorf(FileTools, p+".kind", "a UI_Tool must be of kind ui")
	case t.ToolType == AgentTool && t.Kind == KindUI:
		l.errorf(FileTools, p+".kind", "kind ui is for UI_Tool and Lifecycle_Tool entries")
	}
}

// checkToolAgent checks the owning agent; only a Lifecycle_Tool may have none.
func (l *loader) checkToolAgent(t *Tool, p string) {
	switch {
	case t.Agent == "" && t.ToolType != LifecycleTool:
		l.errorf(FileTools, p+".agent", "required")
	case t.Agent != "" && l.w.agents[t.Agent] == nil:
		l.unknownAgent(FileTools, p+".agent", t.Agent)
	}
}

// checkToolTrigger checks the fields only a Lifecycle_Tool has.
func (l *loader) checkToolTrigger(t *Tool, p string) {
	if t.ToolType != LifecycleTool {
		if t.Trigger != "" {
			l.errorf(FileTools, p+".trigger", "only a Lifecycle_Tool has a trigger")
		}
		if len(t.Arguments) > 0 {
			l.errorf(FileTools, p+".arguments", "only a Lifecycle_Tool has fixed arguments")
		}
		return
	}
	triggers := []string{BeforeChat, BeforeAgent, AfterAgent, AfterChat}
	switch {
	case t.Trigger == "":
		l.errorf(FileTools, p+".trigger", "required for a Lifecycle_Tool (one of %s)", list(triggers...))
	case !oneOf(t.Trigger, triggers...):
		l.errorf(FileTools, p+".trigger", "%q is not one of %s", t.Trigger, list(triggers...))
	}
	if t.Kind == KindMCP {
		l.errorf(FileTools, p+".kind", "a Lifecycle_Tool cannot be of kind mcp")
	}
}

// checkToolUI checks the ui block, which only a tool of kind ui has, and
// defaults its mode to inline.
func (l *loader) checkToolUI(t *Tool, p string) {
	if t.Kind == KindUI {
		if t.UI == nil || strings.TrimSpace(t.UI.Component) == "" {
			what := "a UI_Tool"
			if t.ToolType == LifecycleTool {
				what = "a tool of kind ui"
			}
			l.errorf(FileTools, p+".ui.component", "required for %s", what)
		}
	} else if t.UI != nil {
		l.errorf(FileTools, p+".ui", "only a tool of kind ui has a ui block")
	}
	if t.UI != nil {
		if t.UI.Mode == "" {
			t.UI.Mode = UIInline
		} else if !oneOf(t.UI.Mode, UIInline, UIArtifact) {
			l.errorf(FileTools, p+".ui.mode", "%q is not one of %s", t.UI.Mode, list(UIInline, UIArtifact))
		}
	}
}

// checkToolKind dispatches to the checks of the fields the tool's kind
// requires. A ui tool's fields are checked by checkToolUI; an unknown kind
// was reported by checkToolType.
func (l *loader) checkToolKind(t *Tool, p string) {
	switch t.Kind {
	case KindGo:
		l.checkGoTool(t, p)
	case KindCommand:
		l.checkCommandFile(t, p)
	case KindHTTP:
		l.checkHTTPTool(t, p)
	case KindMCP:
		l.checkMCPTool(t, p)
	case KindA2A:
		l.checkA2ATool(t, p)
	}
}

// checkA2ATool checks an a2a tool's block: the card URL (its environment
// references too) and the name of the token's secret or variable. The card
// itself is fetched at the first call.
func (l *loader) checkA2ATool(t *Tool, p string) {
	if t.A2A == nil {
		l.errorf(FileTools, p+".a2a", "required for an a2a tool (card_url, and optionally skill, token_from and on_input_required)")
		return
	}
	switch {
	case t.A2A.CardURL == "":
		l.errorf(FileTools, p+".a2a.card_url", "required for an a2a tool")
	case !isHTTPURL(t.A2A.CardURL):
		l.errorf(FileTools, p+".a2a.card_url", "%q is not an http or https URL", t.A2A.CardURL)
	}
	l.checkEnvRefs(FileTools, p+".a2a.card_url", t.A2A.CardURL)
	if n := t.A2A.TokenFrom; n != "" {
		if !envNameRe.MatchString(n) {
			l.errorf(FileTools, p+".a2a.token_from", "%q is not a secret or environment variable name", n)
		}
		l.checkEnvName(FileTools, p+".a2a.token_from", n)
	}
	switch t.A2A.OnInputRequired {
	case "", A2AAskPerson, A2AAskModel:
	default:
		l.errorf(FileTools, p+".a2a.on_input_required", "%q is not %q or %q", t.A2A.OnInputRequired, A2AAskPerson, A2AAskModel)
	}
}

// checkGoTool checks a go tool: it names the function it is registered under.
func (l *loader) checkGoTool(t *Tool, p string) {
	if t.Function == "" {
		l.errorf(FileTools, p+".function", "required for a go tool (the name it is registered under)")
	}
}

// checkHTTPTool checks an http tool's url (its headers are checked with the
// environment references in checkForeignFields).
func (l *loader) checkHTTPTool(t *Tool, p string) {
	if t.URL == "" {
		l.errorf(FileTools, p+".url", "required for an http tool")
	} else if !isHTTPURL(t.URL) {
		l.errorf(FileTools, p+".url", "%q is not an http or https URL", t.URL)
	}
}

// checkMCPTool checks an mcp tool: a declared server and no empty tool name.
func (l *loader) checkMCPTool(t *Tool, p string) {
	switch _, ok := l.w.Config.MCPServers[t.Server]; {
	case t.Server == "":
		l.errorf(FileTools, p+".server", "required for an mcp tool (a name from workflow.json mcp_servers)")
	case !ok:
		l.errorf(FileTools, p+".server", "unknown MCP server %q (declare it in workflow.json mcp_servers)", t.Server)
	}
	for i, n := range t.Tools {
		if n == "" {
			l.errorf(FileTools, fmt.Sprintf("%s.tools[%d]", p, i), "must not be empty")
		}
	}
}

// checkForeignFields refuses the fields of another kind than the tool's,
// and checks the environment variable names and references in headers,
// url and env wherever they stand, so a misplaced field reports both.
func (l *loader) checkForeignFields(t *Tool, p string) {
	if t.Kind != KindHTTP && t.URL != "" {
		l.errorf(FileTools, p+".url", "only an http tool has a url")
	}
	if t.Kind != KindMCP && (t.Server != "" || len(t.Tools) > 0 || t.Prefix != "") {
		l.errorf(FileTools, p, "server, tools and prefix are for mcp tools")
	}
	if t.Kind != KindCommand && t.File != "" && t.Kind != KindGo && t.Kind != KindUI {
		l.errorf(FileTools, p+".file", "only a command tool has a file")
	}
	l.checkToolHeaders(t, p)
	if t.Kind != KindHTTP && t.Kind != KindA2A && t.AllowPrivateNetwork {
		l.errorf(FileTools, p+".allow_private_network", "only an http or a2a tool has allow_private_network")
	}
	if t.Kind != KindA2A && t.A2A != nil {
		l.errorf(FileTools, p+".a2a", "only an a2a tool has an a2a block")
	}
	for i, env := range t.Env {
		if !envNameRe.MatchString(env) {
			l.errorf(FileTools, fmt.Sprintf("%s.env[%d]", p, i), "%q is not an environment variable name", env)
		}
		l.checkEnvName(FileTools, fmt.Sprintf("%s.env[%d]", p, i), env)
	}
	if t.Kind != KindCommand && t.Kind != KindGo && len(t.Env) > 0 {
		l.errorf(FileTools, p+".env", "only a command or go tool has env")
	}
}

// checkToolHeaders checks headers_from_env names, the environment
// references in url and headers, and that only an http tool has headers.
func (l *loader) checkToolHeaders(t *Tool, p string) {
	for h, env := range t.HeadersFromEnv {
		if !envNameRe.MatchString(env) {
			l.errorf(FileTools, p+".headers_from_env."+h, "%q is not an environment variable name", env)
		}
		l.checkEnvName(FileTools, p+".headers_from_env."+h, env)
	}
	l.checkEnvRefs(FileTools, p+".url", t.URL)
	for h, v := range t.Headers {
		l.checkEnvRefs(FileTools, p+".headers."+h, v)
	}
	if t.Kind != KindHTTP && (len(t.Headers) > 0 || len(t.HeadersFromEnv) > 0) {
		l.errorf(FileTools, p, "headers and headers_from_env are for http tools")
	}
}

// checkSecretHost refuses an http tool url or an a2a card url in which a
// secret (a value the person types into a masked form) would choose the
// scheme, user or host: the person would choose where the tool's
// credentials are sent.
func (l *loader) checkSecretHost(raw, p string) {
	with := func(v string) string {
		return os.Expand(raw, func(k string) string {
			if l.w.DeclaresSecret(k) {
				return v
			}
			return "v" // the operator's variable: the same either way
		})
	}
	origin := func(s string) string {
		u, err := url.Parse(s)
		if err != nil {
			return "?" + s
		}
		return u.Scheme + "://" + u.User.String() + "@" + u.Host
	}
	if origin(with("")) != origin(with("x0")) {
		l.errorf(FileTools, p, "a secret of a masked form may not choose the url's scheme, user or host (only its path or query)")
	}
}

// checkSecretForm reads a masked form's secret names (arguments.keys) into
// t.SecretNames. The person answering the form can set only these names,
// and tools get them as environment variables, so a name must be declared
// and must not be one that steers a process (ReservedSecretName).
func (l *loader) checkSecretForm(t *Tool, p string) {
	// masked is read on its own: a form that says it is masked is one,
	// and is sealed, however wrong the rest of its arguments are.
	var fixed map[string]any
	if len(t.Arguments) == 0 || json.Unmarshal(t.Arguments, &fixed) != nil || fixed["masked"] == nil {
		return
	}
	if masked, ok := fixed["masked"].(bool); !ok {
		l.errorf(FileTools, p+".arguments.masked", "must be true or false")
		return
	} else if !masked {
		return
	}
	if t.ToolType != LifecycleTool || t.Kind != KindUI {
		l.errorf(FileTools, p+".arguments.masked", "only a Lifecycle_Tool of kind ui is a masked form")
		return
	}
	keys, ok := fixed["keys"].([]any)
	if fixed["keys"] != nil && !ok {
		l.errorf(FileTools, p+".arguments.keys", "must be a list of {\"name\": \"API_KEY\", \"label\": \"...\"} objects")
		return
	}
	if len(keys) == 0 {
		l.errorf(FileTools, p+".arguments.keys", "required for a masked form: the secrets it asks for, as [{\"name\": \"API_KEY\", \"label\": \"...\"}]")
		return
	}
	seen := map[string]bool{}
	names := make([]string, 0, len(keys))
	for i, k := range keys {
		at := fmt.Sprintf("%s.arguments.keys[%d].name", p, i)
		obj, _ := k.(map[string]any)
		name, ok := obj["name"].(string)
		switch {
		case !ok:
			l.errorf(FileTools, at, "required: each key is an object with the secret's name (a string)")
		case !envNameRe.MatchString(name):
			l.errorf(FileTools, at, "%q is not an environment variable name (tools get secrets as environment variables)", name)
		case ReservedSecretName(name):
			l.errorf(FileTools, at, "%q is reserved: a secret must not be able to change how a tool's process runs (PATH, LD_*, BASH_ENV, BATON_* and the like)", name)
		case seen[name]:
			l.errorf(FileTools, at, "%q is listed twice", name)
		default:
			seen[name] = true
			names = append(names, name)
		}
	}
	t.SecretNames = names
}

// reservedSecretNames and reservedSecretPrefixes are environment variables
// that change how a process, its shell, its dynamic loader or its
// interpreter runs. A secret may not take such a name: the person answering
// a masked form chooses the values, and a command tool gets them in its
// environment.
var (
	reservedSecretNames = []string{
		"PATH", "HOME", "TMPDIR", "LANG", "TZ", "SHELL", "USER", "LOGNAME", "PWD", "IFS", "ENV", "BASH_ENV",
		"SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "CDPATH", "GLOBIGNORE", "GCONV_PATH", "HOSTALIASES",
		"RESOLV_HOST_CONF", "NLSPATH", "LOCPATH", "TERMINFO", "PERL5OPT", "PERL5LIB", "PERLLIB", "PERL5DB",
		"NODE_OPTIONS", "NODE_PATH", "RUBYOPT", "RUBYLIB", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS",
		"CLASSPATH", "GOFLAGS", "GODEBUG", "GOTOOLCHAIN", "SSL_CERT_FILE", "SSL_CERT_DIR", "HTTP_PROXY", "HTTPS_PROXY",
		"ALL_PROXY", "NO_PROXY", "TMP", "TEMP", "ZDOTDIR", "OPENSSL_CONF", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
		// Where a program writes its TLS keys, reads its configuration,
		// or which program it starts for the person.
		"SSLKEYLOGFILE", "CURL_HOME", "WGETRC", "EDITOR", "VISUAL", "PAGER", "LESSOPEN", "LESSCLOSE", "BROWSER",
		"SSH_ASKPASS", "SUDO_ASKPASS", "INPUTRC", "MANPAGER", "GNUPGHOME", "SSH_AUTH_SOCK", "KRB5CCNAME",
	}
	reservedSecretPrefixes = []string{"BATON_", "LD_", "DYLD_", "LC_", "PYTHON", "PERL", "RUBY", "NODE_", "JAVA_", "_JAVA_",
		"JDK_", "DOTNET_", "LUA_", "XDG_", "GIT_", "MALLOC_", "BASH_FUNC_", "GLIBC_", "NPM_CONFIG_"}
)

// ReservedSecretName reports whether name may not be a secret's name (see
// reservedSecretNames); the check ignores case, as some platforms do.
func ReservedSecretName(name string) bool {
	up := strings.ToUpper(name)
	if slices.Contains(reservedSecretNames, up) {
		return true
	}
	for _, prefix := range reservedSecretPrefixes {
		if strings.HasPrefix(up, prefix) {
			return true
		}
	}
	return false
}

func (l *loader) checkCommandFile(t *Tool, p string) {
	if t.File == "" {
		l.errorf(FileTools, p+".file", "required for a command tool (an executable in tools/)")
		return
	}
	rel := path.Join("tools", t.File)
	if !fs.ValidPath(rel) || strings.Contains(t.File, "..") || strings.HasPrefix(t.File, "/") {
		l.errorf(FileTools, p+".file", "%q must be a path inside tools/", t.File)
		return
	}
	l.checkInside(FileTools, p+".file", rel)
}

// checkInside checks that rel, a file the workflow runs (a command tool, a
// stdio MCP server), exists inside the workflow folder once every symbolic
// link on its way is resolved: a link under tools/ to /bin/sh, or out of
// the folder, would run a program the folder does not hold.
func (l *loader) checkInside(file, p, rel string) {
	resolved, err := resolveInside(l.w.FS, l.w.Dir, rel)
	if err != nil {
		l.errorf(file, p, "%s: %v", rel, err)
		return
	}
	st, err := fs.Stat(l.w.FS, path.Join(l.w.Dir, resolved))
	switch {
	case err != nil:
		l.errorf(file, p, "%s not found", rel)
	case st.IsDir():
		l.errorf(file, p, "%s is a directory", rel)
	}
}

// resolveInside resolves the symbolic links of rel (a path relative to the
// workflow folder dir in fsys) and returns the resolved path, relative to
// dir. It is an error for rel or any link's target to leave dir.
func resolveInside(fsys fs.FS, dir, rel string) (string, error) {
	parts := strings.Split(rel, "/")
	var done []string
	for hops := 0; len(parts) > 0; {
		part := parts[0]
		parts = parts[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			if len(done) == 0 {
				return "", errors.New("leaves the workflow folder")
			}
			done = done[:len(done)-1]
			continue
		}
		cur := path.Join(append(done, part)...)
		fi, err := fs.Lstat(fsys, path.Join(dir, cur))
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			// A missing file is reported by the caller's Stat.
			done = append(done, part)
			continue
		}
		if hops++; hops > 40 {
			return "", errors.New("too many symbolic links")
		}
		target, err := fs.ReadLink(fsys, path.Join(dir, cur))
		if err != nil {
			return "", fmt.Errorf("read link: %w", err)
		}
		if path.IsAbs(target) {
			return "", fmt.Errorf("a symbolic link to %s, outside the workflow folder", target)
		}
		// The target is relative to the link's folder: resolve it from
		// there, then go on with what is left of rel.
		parts = append(strings.Split(target, "/"), parts...)
	}
	return path.Join(done...), nil
}

func (l *loader) checkParameters(t *Tool, p string) {
	var obj map[string]any
	if err := json.Unmarshal(t.Parameters, &obj); err != nil || obj == nil {
		l.errorf(FileTools, p+".parameters", "must be a JSON Schema object")
		return
	}
	if typ, _ := obj["type"].(string); typ != "object" {
		l.errorf(FileTools, p+".parameters.type", "must be \"object\" (tool arguments are a JSON object)")
		return
	}
	name := t.Name
	if name == "" {
		name = fmt.Sprint(t.Index)
	}
	s, err := compileParameters(name, t.Parameters)
	if err != nil {
		where, msg := schemaError(err)
		l.errorf(FileTools, p+".parameters"+where, "not a valid JSON Schema: %s", msg)
		return
	}
	t.Schema = s
	if len(t.Arguments) > 0 && string(t.Arguments) != "null" {
		var args any
		_ = json.Unmarshal(t.Arguments, &args)
		if err := s.Validate(args); err != nil {
			l.errorf(FileTools, p+".arguments", "do not match parameters: %s", oneLine(err))
		}
	}
}

// schemaError turns a schema compilation error into the path inside the
// schema (".properties.q.type") and the first thing wrong there.
func schemaError(err error) (string, string) {
	var se *jsonschema.SchemaValidationError
	var ve *jsonschema.ValidationError
	if !errors.As(err, &se) || !errors.As(se.Err, &ve) {
		return "", oneLine(err)
	}
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	where := ""
	for _, p := range ve.InstanceLocation {
		if _, err := strconv.Atoi(p); err == nil {
			where += "[" + p + "]"
		} else {
			where += "." + p
		}
	}
	return where, ve.ErrorKind.LocalizedString(printer)
}

func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an"
	}
	return "a"
}

// oneLine joins a multi-line error (as jsonschema writes them) into one line.
func oneLine(err error) string {
	lines := strings.Split(strings.TrimSpace(err.Error()), "\n")
	for i := range lines {
		lines[i] = strings.TrimPrefix(strings.TrimSpace(lines[i]), "- ")
	}
	if len(lines) > 1 && strings.HasPrefix(lines[0], "jsonschema") {
		lines = lines[1:]
	}
	return strings.Join(lines, "; ")
}

func (l *loader) checkDerived() {
	w := l.w
	triggers := []string{AgentTextEquals, AgentTextContains, AgentTextPrefix, ToolCalled, StructuredOutputField}
	for i, d := range w.DerivedVariables {
		p := fmt.Sprintf("derived_variables[%d]", i)
		switch {
		case d.TriggerType == "":
			l.errorf(FileContextVariables, p+".trigger_type", "required (one of %s)", list(triggers...))
		case !oneOf(d.TriggerType, triggers...):
			l.errorf(FileContextVariables, p+".trigger_type", "%q is not one of %s", d.TriggerType, list(triggers...))
		}
		a := w.agents[d.SourceAgent]
		switch {
		case d.SourceAgent == "":
			l.errorf(FileContextVariables, p+".source_agent", "required")
		case a == nil:
			l.unknownAgent(FileContextVariables, p+".source_agent", d.SourceAgent)
		}
		if d.TriggerValue == "" {
			l.errorf(FileContextVariables, p+".trigger_value", "required")
			continue
		}
		if d.UIHidden && !oneOf(d.TriggerType, AgentTextEquals, AgentTextContains, AgentTextPrefix) {
			l.errorf(FileContextVariables, p+".ui_hidden", "only a text trigger hides the message that fired it")
		}
		if a == nil || l.broken[FileTools] && d.TriggerType == ToolCalled || l.broken[FileStructuredOutputs] && d.TriggerType == StructuredOutputField {
			continue
		}
		switch d.TriggerType {
		case ToolCalled:
			t := w.tools[d.TriggerValue]
			if t == nil || t.Agent != d.SourceAgent && !slices.Contains(a.Tools, t.Name) {
				l.errorf(FileContextVariables, p+".trigger_value", "%s has no tool %q", d.SourceAgent, d.TriggerValue)
			}
		case StructuredOutputField:
			m := w.models[w.Registry[d.SourceAgent]]
			if m == nil {
				l.errorf(FileContextVariables, p+".trigger_value", "%s has no structured-output model in structured_outputs.json", d.SourceAgent)
				continue
			}
			typ, err := w.fieldPathType(m, d.TriggerValue)
			if err != nil {
				l.errorf(FileContextVariables, p+".trigger_value", "%v", err)
				continue
			}
			w.varTypes[d.Name] = typ
		}
	}
}

// fieldPathType resolves a dotted field path in a model to the variable
// type of its value.
func (w *Workflow) fieldPathType(m *Model, fieldPath string) (string, error) {
	cur := m
	parts := strings.Split(fieldPath, ".")
	for i, part := range parts {
		f := cur.Fields[part]
		if f == nil {
			return "", fmt.Errorf("%s has no field %q", cur.Name, part)
		}
		ft, err := parseFieldType(f.Type, f.Values)
		if err != nil {
			return TypeAny, nil // reported by checkModels
		}
		if i == len(parts)-1 {
			if ft.nullable {
				return TypeAny, nil
			}
			return ft.varType(), nil
		}
		if ft.kind != "model" || w.models[ft.model] == nil {
			return "", fmt.Errorf("%s.%s is not a model; %q cannot go deeper", cur.Name, part, fieldPath)
		}
		cur = w.models[ft.model]
	}
	return TypeAny, nil
}

func (l *loader) checkModels() {
	w := l.w
	for _, m := range w.Models {
		p := "structured_outputs.models." + m.Name
		if m.Type != "" && m.Type != "model" {
			l.errorf(FileStructuredOutputs, p+".type", "must be \"model\"")
		}
		if len(m.FieldOrder) == 0 {
			l.errorf(FileStructuredOutputs, p+".fields", "a model needs at least one field")
		}
		m.types = map[string]*fieldType{}
		for _, name := range m.FieldOrder {
			f := m.Fields[name]
			fp := p + ".fields." + name
			if f == nil {
				l.errorf(FileStructuredOutputs, fp, "must be an object, not null")
				continue
			}
			ft, err := parseFieldType(f.Type, f.Values)
			if err != nil {
				l.errorf(FileStructuredOutputs, fp+".type", "%v", err)
				continue
			}
			if len(f.Values) > 0 && f.Type != "enum" {
				l.errorf(FileStructuredOutputs, fp+".values", "only an enum field has values")
			}
			if f.Optional {
				ft.nullable = true
			}
			if missing := ft.unknownModel(w.models); missing != "" {
				l.errorf(FileStructuredOutputs, fp+".type", "unknown model %q", missing)
				continue
			}
			m.types[name] = ft
		}
	}
	for _, agent := range l.registry {
		p := "structured_outputs.registry." + agent
		if w.agents[agent] == nil {
			l.unknownAgent(FileStructuredOutputs, p, agent)
		}
		if model := w.Registry[agent]; w.models[model] == nil {
			l.errorf(FileStructuredOutputs, p, "unknown model %q", model)
		}
	}
}

// unknownModel returns the first model name t refers to that is not in models.
func (t *fieldType) unknownModel(models map[string]*Model) string {
	switch t.kind {
	case "model":
		if models[t.model] == nil {
			return t.model
		}
	case "list":
		return t.elem.unknownModel(models)
	}
	return ""
}

// bindAgents computes the per-agent lookups.
func (l *loader) bindAgents() {
	w := l.w
	visual := map[string]bool{}
	for _, v := range w.Config.VisualAgents {
		visual[v] = true
	}
	for _, a := range w.Agents {
		a.visual = visual[a.Name]
		a.model = w.models[w.Registry[a.Name]]
		a.tools = nil
		for _, t := range w.Tools {
			if t.Agent != a.Name || t.ToolType == LifecycleTool {
				continue
			}
			a.tools = append(a.tools, t)
			if t.ToolType == UITool {
				a.toolAg = true
				if a.AutoToolMode && a.autoTool == nil {
					a.autoTool = t
				}
			}
		}
		for _, n := range a.Tools {
			if t := w.tools[n]; t != nil && t.Agent != a.Name && t.ToolType != LifecycleTool {
				a.tools = append(a.tools, t)
			}
		}
	}
}

// checkReachability reports agents that no start or handoff can reach.
// The person is always reachable (a turn that no rule moves on from waits
// for the person), so rules whose source is "user" count from the start.
func (l *loader) checkReachability() {
	w := l.w
	reached := map[string]bool{w.Config.Orchestration.InitialAgent: true, UserAgent: true}
	queue := []string{w.Config.Orchestration.InitialAgent, UserAgent}
	for len(queue) > 0 {
		src := queue[0]
		queue = queue[1:]
		for _, r := range w.rules[src] {
			if r.TransitionTarget == AgentTarget && !reached[r.TargetAgent] {
				reached[r.TargetAgent] = true
				queue = append(queue, r.TargetAgent)
			}
		}
	}
	for _, a := range w.Agents {
		if !reached[a.Name] {
			l.errorf(FileAgents, "agents."+a.Name, "unreachable: neither orchestration.initial_agent nor a handoff rule from a reachable agent leads to %s", a.Name)
		}
	}
}

// checkAfterWorkCycles reports loops of unconditional after_work rules
// between agents that offer no other way out: no condition or llm rule, no
// UI tool that asks the person, so the chat would go round until max_turns.
func (l *loader) checkAfterWorkCycles() {
	w := l.w
	next := map[string]*HandoffRule{}
	for _, r := range w.Handoffs {
		if r.HandoffType == HandoffAfterWork && r.Condition == "" && r.SourceAgent != UserAgent {
			if _, ok := next[r.SourceAgent]; !ok {
				next[r.SourceAgent] = r
			}
		}
	}
	hasExit := func(agent string) bool {
		for _, r := range w.rules[agent] {
			if r.HandoffType != HandoffAfterWork || r.Condition != "" {
				return true
			}
		}
		a := w.agents[agent]
		if a.toolAg || len(w.LifecycleTools(BeforeAgent, agent)) > 0 || len(w.LifecycleTools(AfterAgent, agent)) > 0 {
			return true
		}
		return false
	}
	reported := map[string]bool{}
	for _, a := range w.Agents {
		// Follow the after_work chain from a; a cycle is found when a name repeats.
		seen := map[string]int{}
		var chain []string
		cur := a.Name
		for {
			r := next[cur]
			if r == nil || r.TransitionTarget != AgentTarget {
				break
			}
			if _, ok := seen[cur]; ok {
				cycle := chain[seen[cur]:]
				key := slices.Min(cycle)
				if reported[key] {
					break
				}
				reported[key] = true
				if !slices.ContainsFunc(cycle, hasExit) {
					first := next[cycle[0]]
					l.errorf(FileHandoffs, fmt.Sprintf("handoff_rules[%d]", first.Index),
						"after_work cycle %s -> %s never reaches the person or a terminate", strings.Join(cycle, " -> "), cycle[0])
				}
				break
			}
			seen[cur] = len(chain)
			chain = append(chain, cur)
			cur = r.TargetAgent
		}
	}
}

// checkMCPCommand checks a stdio MCP server's command as a command tool's
// file is checked: a relative path (with a slash, like tools/server) to a
// file inside the workflow folder, symbolic links resolved. A bare name
// would be looked up in PATH, and anything on the host (/bin/sh) could be
// the server; a workflow that wants npx ships a script that runs it.
func (l *loader) checkMCPCommand(p, command string) {
	switch {
	case !strings.Contains(command, "/"):
		l.errorf(FileWorkflow, p, "%q must be a path inside the workflow folder, like tools/%s (a bare name would run any program in PATH)", command, command)
	case path.IsAbs(command) || !fs.ValidPath(path.Clean(command)) || strings.Contains(command, ".."):
		l.errorf(FileWorkflow, p, "%q must be a path inside the workflow folder", command)
	default:
		l.checkInside(FileWorkflow, p, path.Clean(command))
	}
}

// checkEnvRefs refuses ${VAR} and $VAR references in s to baton's own
// credentials (baton.ServerOnlyEnv).
func (l *loader) checkEnvRefs(file, p, s string) {
	os.Expand(s, func(name string) string {
		l.checkEnvName(file, p, name)
		return ""
	})
}

// checkEnvName refuses a variable a workflow reads from baton's
// environment when it is one of baton's own credentials.
func (l *loader) checkEnvName(file, p, name string) {
	if baton.ServerOnlyEnv(name) {
		l.errorf(file, p, "%s is baton's own credential; no workflow may read it", name)
	}
}

// maxPrice bounds a price in US dollars per million tokens: far above any
// model's, and low enough that no call's cost overflows to infinity, which
// no store keeps and no event encodes.
const maxPrice = 1e6

// validPrice reports whether p is a price a workflow may set: a number
// from 0 to maxPrice (NaN is neither).
func validPrice(p float64) bool { return p >= 0 && p <= maxPrice }
