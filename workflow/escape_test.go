package workflow_test

import (
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/batonhq/baton/workflow"
)

// escapeFS is a workflow whose command tool file and MCP server command
// are set by the test, with a link farm under tools/.
func escapeFS(toolFile, mcpCommand string) fstest.MapFS {
	link := func(target string) *fstest.MapFile {
		return &fstest.MapFile{Data: []byte(target), Mode: fs.ModeSymlink | 0o777}
	}
	return fstest.MapFS{
		"w/workflow.json": {Data: []byte(`{"orchestration": {"initial_agent": "A"}, "mcp_servers": {"s": {"command": "` + mcpCommand + `"}}}`)},
		"w/agents.json":   {Data: []byte(`{"agents": {"A": {"system_message": "hi"}}}`)},
		"w/tools.json": {Data: []byte(`{"tools": [
			{"agent": "A", "name": "run", "file": "` + toolFile + `", "kind": "command", "tool_type": "Agent_Tool"},
			{"agent": "A", "kind": "mcp", "tool_type": "Agent_Tool", "server": "s"}]}`)},
		"w/tools/ok.sh":     {Data: []byte("#!/bin/sh\n"), Mode: 0o755},
		"w/tools/alias.sh":  link("ok.sh"),
		"w/tools/sub/up.sh": link("../ok.sh"),
		"w/tools/shell":     link("/bin/sh"),
		"w/tools/out":       link("../../elsewhere/run.sh"),
		"w/tools/dir":       link("/usr/bin"),
		"elsewhere/run.sh":  {Data: []byte("#!/bin/sh\n"), Mode: 0o755},
	}
}

// TestCommandsStayInTheWorkflowFolder: a command tool's file and a stdio
// MCP server's command must be files of the workflow folder, with every
// symbolic link resolved; a link to /bin/sh, a link out of the folder, a
// path with .., an absolute path and a bare name found in PATH are refused,
// naming the field.
func TestCommandsStayInTheWorkflowFolder(t *testing.T) {
	for _, ok := range [][2]string{{"ok.sh", "tools/ok.sh"}, {"alias.sh", "tools/alias.sh"}, {"sub/up.sh", "./tools/sub/up.sh"}} {
		if _, err := workflow.Load(escapeFS(ok[0], ok[1]), "w"); err != nil {
			t.Errorf("file %s, command %s: %v", ok[0], ok[1], err)
		}
	}
	for _, c := range []struct{ file, command, mention string }{
		{"shell", "tools/ok.sh", "tools[0].file: tools/shell: a symbolic link to /bin/sh"},
		{"out", "tools/ok.sh", "tools[0].file: tools/out: leaves the workflow folder"},
		{"dir/sh", "tools/ok.sh", "tools[0].file: tools/dir/sh: a symbolic link to /usr/bin"},
		{"ok.sh", "npx", `mcp_servers.s.command: "npx" must be a path inside the workflow folder`},
		{"ok.sh", "/bin/sh", `mcp_servers.s.command: "/bin/sh" must be a path inside`},
		{"ok.sh", "../elsewhere/run.sh", `mcp_servers.s.command: "../elsewhere/run.sh" must be a path inside`},
		{"ok.sh", "tools/shell", "mcp_servers.s.command: tools/shell: a symbolic link to /bin/sh"},
		{"ok.sh", "tools/out", "mcp_servers.s.command: tools/out: leaves the workflow folder"},
	} {
		_, err := workflow.Load(escapeFS(c.file, c.command), "w")
		if err == nil || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("file %s, command %s: %v, want an error naming %q", c.file, c.command, err, c.mention)
		}
	}
}

// TestWorkflowsCannotReadBatonsCredentials: no reference of a workflow to
// the environment may name the sealing key, the metrics token or the
// store and bus addresses.
func TestWorkflowsCannotReadBatonsCredentials(t *testing.T) {
	base := escapeFS("ok.sh", "tools/ok.sh")
	for _, c := range []struct{ file, data, mention string }{
		{"w/tools.json", `{"tools": [{"agent": "A", "name": "run", "file": "ok.sh", "kind": "command", "tool_type": "Agent_Tool", "env": ["BATON_SECRET_KEY"]}]}`, "tools[0].env[0]: BATON_SECRET_KEY is baton's own credential"},
		{"w/tools.json", `{"tools": [{"agent": "A", "name": "h", "kind": "http", "tool_type": "Agent_Tool", "url": "https://x.example/${BATON_METRICS_TOKEN}"}]}`, "tools[0].url: BATON_METRICS_TOKEN"},
		{"w/tools.json", `{"tools": [{"agent": "A", "name": "h", "kind": "http", "tool_type": "Agent_Tool", "url": "https://x.example/", "headers_from_env": {"X-K": "BATON_STORE"}}]}`, "tools[0].headers_from_env.X-K: BATON_STORE"},
		{"w/workflow.json", `{"orchestration": {"initial_agent": "A"}, "mcp_servers": {"s": {"command": "tools/ok.sh", "env": {"K": "${BATON_SECRET_KEY}"}}}}`, "mcp_servers.s.env.K: BATON_SECRET_KEY"},
		{"w/context_variables.json", `{"variables": {"v": {"type": "str", "from_env": "BATON_SECRET_KEY"}}}`, "variables.v.from_env: no longer supported"},
	} {
		fsys := fstest.MapFS{}
		for k, v := range base {
			fsys[k] = v
		}
		fsys[c.file] = &fstest.MapFile{Data: []byte(c.data)}
		_, err := workflow.Load(fsys, "w")
		if err == nil || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%s: %v, want an error naming %q", c.data, err, c.mention)
		}
	}
}

// TestSecretCannotChooseTheHost: an http tool url whose scheme, user or
// host comes from a masked form's secret does not load; one with the
// secret in its path does. allow_private_network is for http tools only.
func TestSecretCannotChooseTheHost(t *testing.T) {
	load := func(url string, extra string) error {
		fsys := fstest.MapFS{
			"w/workflow.json": {Data: []byte(`{"orchestration": {"initial_agent": "A"}}`)},
			"w/agents.json":   {Data: []byte(`{"agents": {"A": {"system_message": "hi"}}}`)},
			"w/tools.json": {Data: []byte(`{"tools": [
				{"agent": "A", "name": "keys", "tool_type": "Lifecycle_Tool", "kind": "ui", "trigger": "before_chat", "ui": {"component": "SecretsInput"},
				 "arguments": {"masked": true, "keys": [{"name": "ACCOUNT", "label": "Account"}]}},
				{"agent": "A", "name": "h", "kind": "http", "tool_type": "Agent_Tool", "url": "` + url + `"}` + extra + `]}`)},
		}
		_, err := workflow.Load(fsys, "w")
		return err
	}
	for _, ok := range []string{"https://api.example.com/orders/${ACCOUNT}", "${BASE}/orders?a=${ACCOUNT}"} {
		if err := load(ok, ""); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"https://${ACCOUNT}/x", "https://${ACCOUNT}.example.com/", "https://${ACCOUNT}@api.example.com/", "https://api.example.com:${ACCOUNT}/"} {
		if err := load(bad, ""); err == nil || !strings.Contains(err.Error(), "tools[1].url: a secret of a masked form may not choose") {
			t.Errorf("%s: %v, want refused", bad, err)
		}
	}
	err := load("https://api.example.com/", `, {"agent": "A", "name": "g", "function": "g", "kind": "go", "tool_type": "Agent_Tool", "allow_private_network": true}`)
	if err == nil || !strings.Contains(err.Error(), "tools[2].allow_private_network") {
		t.Errorf("allow_private_network on a go tool: %v", err)
	}
}

// TestSecretCannotChooseTheA2AHost: an a2a tool's card url whose scheme,
// user or host comes from a masked form's secret does not load (the
// operator's token would go where the person points it); one with the
// secret in its path does.
func TestSecretCannotChooseTheA2AHost(t *testing.T) {
	load := func(url string) error {
		fsys := fstest.MapFS{
			"w/workflow.json": {Data: []byte(`{"orchestration": {"initial_agent": "A"}}`)},
			"w/agents.json":   {Data: []byte(`{"agents": {"A": {"system_message": "hi"}}}`)},
			"w/tools.json": {Data: []byte(`{"tools": [
				{"agent": "A", "name": "keys", "tool_type": "Lifecycle_Tool", "kind": "ui", "trigger": "before_chat", "ui": {"component": "SecretsInput"},
				 "arguments": {"masked": true, "keys": [{"name": "ACCOUNT", "label": "Account"}]}},
				{"agent": "A", "name": "h", "kind": "a2a", "tool_type": "Agent_Tool", "a2a": {"card_url": "` + url + `", "token_from": "AGENT_KEY"}}]}`)},
		}
		_, err := workflow.Load(fsys, "w")
		return err
	}
	if err := load("https://agents.example.com/a2a/${ACCOUNT}"); err != nil {
		t.Errorf("secret in the path: %v", err)
	}
	for _, bad := range []string{"https://${ACCOUNT}/", "https://${ACCOUNT}.example.com/", "https://${ACCOUNT}@agents.example.com/"} {
		if err := load(bad); err == nil || !strings.Contains(err.Error(), "tools[1].a2a.card_url: a secret of a masked form may not choose") {
			t.Errorf("%s: %v, want refused", bad, err)
		}
	}
}

// TestReservedSecretNames: a masked form may not ask for a secret whose
// name steers a program (where it logs TLS keys, reads its configuration,
// which program it starts); the load error names the field.
func TestReservedSecretNames(t *testing.T) {
	for _, name := range []string{"SSLKEYLOGFILE", "CURL_HOME", "WGETRC", "EDITOR", "PAGER", "LESSOPEN", "BROWSER", "sslkeylogfile", "PATH", "BATON_X"} {
		if !workflow.ReservedSecretName(name) {
			t.Errorf("%s is not reserved", name)
		}
	}
	if workflow.ReservedSecretName("NEWSLETTER_API_KEY") {
		t.Error("an ordinary name is reserved")
	}
	fsys := fstest.MapFS{
		"w/workflow.json": {Data: []byte(`{"orchestration": {"initial_agent": "A"}}`)},
		"w/agents.json":   {Data: []byte(`{"agents": {"A": {"system_message": "hi"}}}`)},
		"w/tools.json": {Data: []byte(`{"tools": [{"agent": "A", "name": "keys", "tool_type": "Lifecycle_Tool", "kind": "ui", "trigger": "before_chat",
			"ui": {"component": "SecretsInput"}, "arguments": {"masked": true, "keys": [{"name": "SSLKEYLOGFILE", "label": "x"}]}}]}`)},
	}
	if _, err := workflow.Load(fsys, "w"); err == nil || !strings.Contains(err.Error(), `tools[0].arguments.keys[0].name: "SSLKEYLOGFILE" is reserved`) {
		t.Fatalf("a form asking for SSLKEYLOGFILE: %v", err)
	}
}
