package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestHelp_EveryCommand: `baton help CMD` and `baton CMD -h` show the
// command's synopsis, flags and at least one example.
func TestHelp_EveryCommand(t *testing.T) {
	if len(commands) < 7 {
		t.Fatalf("only %d commands registered", len(commands))
	}
	for _, c := range sortedCommands() {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{"help", c.name}, &out, &errb); code != 0 {
			t.Errorf("help %s: exit %d: %s", c.name, code, errb.String())
			continue
		}
		help := out.String()
		_, examples, _ := strings.Cut(help, "\nExamples:\n  ")
		if !strings.HasPrefix(help, "Usage: baton "+c.name) || !strings.Contains(examples, "baton "+c.name) {
			t.Errorf("help %s lacks its synopsis or an example:\n%s", c.name, help)
		}
		for _, f := range commandFlags(c) {
			if !strings.Contains(help, "-"+f.name+" ") && !strings.Contains(help, "-"+f.name+"\n") {
				t.Errorf("help %s does not list -%s", c.name, f.name)
			}
		}
		out.Reset()
		errb.Reset()
		if code := run(context.Background(), []string{c.name, "-h"}, &out, &errb); code != 0 || errb.String() != help {
			t.Errorf("%s -h: exit %d, and a help other than `baton help %s`:\n%s", c.name, code, c.name, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"help", "nope"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `unknown command "nope"`) {
		t.Errorf("help nope: exit %d, %q", code, errb.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "baton help COMMAND") {
		t.Errorf("help: exit %d, %q", code, out.String())
	}
}

// TestHelp_FlagsNameTheirEnvironmentVariables holds the help to README's
// configuration table, the contract: every flag the table gives an
// environment variable names it in its help, and that variable really sets
// the flag's default.
func TestHelp_FlagsNameTheirEnvironmentVariables(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]flagInfo{}
	for _, name := range []string{"serve", "chat"} {
		for _, f := range commandFlags(commands[name]) {
			flags[f.name] = f
		}
	}
	flagRe := regexp.MustCompile("`--([a-z-]+)`")
	envRe := regexp.MustCompile("`([A-Z_]+)(=1)?`")
	rows := 0
	for line := range strings.SplitSeq(string(readme), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 5 || !strings.Contains(cells[1], "`--") {
			continue
		}
		names, envs := flagRe.FindAllStringSubmatch(cells[1], -1), envRe.FindAllStringSubmatch(cells[2], -1)
		for i, n := range names {
			f, ok := flags[n[1]]
			if !ok {
				t.Errorf("README's --%s is no flag of serve or chat", n[1])
				continue
			}
			rows++
			if i >= len(envs) {
				continue // no environment variable
			}
			env := envs[i][1]
			if !strings.Contains(f.usage, "env "+env) {
				t.Errorf("--%s's help does not name %s: %q", f.name, env, f.usage)
			}
			// The variable is the flag's default.
			val := "7"
			for _, g := range commandFlagValues(commands["serve"]) {
				if _, err := time.ParseDuration(g.def); g.name == f.name && err == nil && g.def != "0" {
					val = "7s" // a duration flag
				}
			}
			t.Setenv(env, val)
			if env == "BATON_DEV" {
				t.Setenv(env, "1")
			}
			for _, name := range []string{"serve", "chat"} {
				for _, g := range commandFlagValues(commands[name]) {
					if g.name == f.name && g.def != val && g.def != "true" {
						t.Errorf("with %s set, --%s defaults to %q", env, f.name, g.def)
					}
				}
			}
		}
	}
	if rows < 20 {
		t.Fatalf("found only %d flags in README's configuration table", rows)
	}
}

type flagDefault struct{ name, def string }

func commandFlagValues(c command) []flagDefault {
	fs := newFlagSet(c.name, &bytes.Buffer{})
	c.flags(fs)
	var out []flagDefault
	fs.VisitAll(func(f *flag.Flag) { out = append(out, flagDefault{f.Name, f.DefValue}) })
	return out
}

// TestCompletion_Bash loads `baton completion bash` into bash and asks it
// to complete, as a shell does on Tab.
func TestCompletion_Bash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash here")
	}
	var script, errb bytes.Buffer
	if code := run(context.Background(), []string{"completion", "bash"}, &script, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	complete := func(words ...string) []string {
		t.Helper()
		prog := script.String() + "\nCOMP_WORDS=(" + shellWords(words) + ")\nCOMP_CWORD=" + itoa(len(words)-1) + "\n_baton\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
		cmd := exec.Command(bash, "--norc", "--noprofile", "-c", prog)
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return strings.Fields(string(out))
	}
	for _, c := range []struct {
		words []string
		want  []string
	}{
		{[]string{"baton", "ch"}, []string{"chat"}},
		{[]string{"baton", "c"}, []string{"chat", "completion"}},
		{[]string{"baton", "chat", "--da"}, []string{"--data-dir"}},
		{[]string{"baton", "serve", "--chat-max"}, []string{"--chat-max-cost-usd", "--chat-max-tokens"}},
		{[]string{"baton", "completion", ""}, []string{"bash", "zsh", "fish"}},
		{[]string{"baton", "help", "va"}, []string{"validate"}},
		{[]string{"baton", "keys", "r"}, []string{"revoke"}},
	} {
		if got := complete(c.words...); strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("%q completes to %q, want %q", c.words, got, c.want)
		}
	}
}

// TestCompletion_EveryShellKnowsEveryFlag: the zsh and fish scripts name
// every command and flag (and parse, where the shell is installed).
func TestCompletion_EveryShellKnowsEveryFlag(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		var script, errb bytes.Buffer
		if code := run(context.Background(), []string{"completion", shell}, &script, &errb); code != 0 {
			t.Fatalf("%s: exit %d: %s", shell, code, errb.String())
		}
		for _, c := range sortedCommands() {
			if !strings.Contains(script.String(), c.name) {
				t.Errorf("%s: no command %s", shell, c.name)
			}
			for _, f := range commandFlags(c) {
				want := "--" + f.name
				if shell == "fish" {
					want = "-l " + f.name
				}
				if !strings.Contains(script.String(), want) {
					t.Errorf("%s: no %s of %s", shell, want, c.name)
				}
			}
		}
		if bin, err := exec.LookPath(shell); err == nil {
			if out, err := exec.Command(bin, "-n", "-c", script.String()).CombinedOutput(); err != nil {
				t.Errorf("%s -n: %v\n%s", shell, err, out)
			}
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"completion", "tcsh"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `"tcsh" is not bash, zsh or fish`) {
		t.Errorf("completion tcsh: exit %d, %q", code, errb.String())
	}
}

func shellWords(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + w + "'"
	}
	return strings.Join(q, " ")
}

func itoa(n int) string { return strconv.Itoa(n) }
