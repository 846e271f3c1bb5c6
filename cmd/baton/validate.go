package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/batonhq/baton/workflow"
	"github.com/batonhq/baton/workflows"
)

func init() {
	register(command{
		name:    "validate",
		summary: "check workflow folders and explain every mistake",
		usage:   "validate [DIR...]",
		about:   "DIR is a workflow folder (holding workflow.json) or a folder of them; with no DIR, the example\nworkflows built into baton are checked. Prints \"ok NAME (N agents, M tools)\" for each valid workflow\nand every mistake of the others as FILE:LINE:COL: PATH: what is wrong; exits 1 on any mistake.",
		example: "baton validate ./workflows/generator\nbaton validate ./my-workflows            # every workflow folder in it",
		args:    argDirs,
		flags: func(*flag.FlagSet) runner {
			return func(ctx context.Context, fs *flag.FlagSet, stdout, stderr io.Writer) error {
				return runValidate(ctx, fs.Args(), stdout, stderr)
			}
		},
	})
}

// runValidate loads each DIR (a workflow folder, or a folder of workflow
// folders) or, with no DIR, the embedded examples. It prints
// "ok NAME (N agents, M tools)" for each valid workflow and every mistake of
// the others, and fails when there is any mistake.
func runValidate(_ context.Context, dirs []string, stdout, stderr io.Writer) error {
	failed := false
	report := func(ws []*workflow.Workflow, err error) error {
		for _, w := range ws {
			fmt.Fprintf(stdout, "ok %s (%s, %s)\n", w.Name, plural(len(w.Agents), "agent"), plural(len(w.Tools), "tool"))
		}
		if err != nil {
			var ve workflow.ValidationErrors
			if !errors.As(err, &ve) {
				return err
			}
			failed = true
			for _, fe := range ve {
				fmt.Fprintln(stdout, fe.Error())
				printCaret(stdout, fe)
			}
		}
		return nil
	}
	if len(dirs) == 0 {
		if err := report(workflow.LoadAll(workflows.FS)); err != nil {
			return err
		}
	}
	for _, dir := range dirs {
		ws, err := loadDir(dir)
		if err := report(ws, err); err != nil {
			return err
		}
	}
	if failed {
		return exitError{code: 1}
	}
	return nil
}

// loadDir loads dir as one workflow when it holds a workflow.json, and
// otherwise every workflow folder in it. Error paths are relative to dir's
// parent (one workflow) or to dir (a folder of them).
func loadDir(dir string) ([]*workflow.Workflow, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	if _, err := os.Stat(filepath.Join(abs, workflow.FileWorkflow)); err == nil {
		w, err := workflow.Load(os.DirFS(filepath.Dir(abs)), filepath.Base(abs))
		if err != nil {
			return nil, err
		}
		return []*workflow.Workflow{w}, nil
	}
	ws, err := workflow.LoadAll(os.DirFS(abs))
	if err == nil && len(ws) == 0 {
		return nil, fmt.Errorf("%s: no workflow folders (none holds a %s)", dir, workflow.FileWorkflow)
	}
	return ws, err
}

// printCaret shows a condition under its error with a caret at the column
// the mistake is at, as compilers do.
func printCaret(w io.Writer, fe *workflow.FieldError) {
	var ce *workflow.ConditionError
	if !errors.As(fe, &ce) || ce.Column <= 0 || strings.ContainsAny(ce.Source, "\n\r") {
		return
	}
	before := ce.Source[:min(ce.Column-1, len(ce.Source))]
	fmt.Fprintf(w, "    %s\n    %s^\n", ce.Source, strings.Repeat(" ", utf8.RuneCountInString(before)))
}

// plural is "1 agent", "2 agents".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
