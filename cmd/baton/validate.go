package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/batonhq/baton/workflow"
	"github.com/batonhq/baton/workflows"
)

func init() {
	register(command{name: "validate", summary: "check workflow folders and explain every mistake", run: runValidate})
}

// runValidate loads each DIR (a workflow folder, or a folder of workflow
// folders) or, with no DIR, the embedded examples. It prints
// "ok NAME (N agents, M tools)" for each valid workflow and every mistake of
// the others, and fails when there is any mistake.
func runValidate(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("validate", stderr)
	fset.Usage = func() {
		fmt.Fprintln(stderr, "Usage: baton validate [DIR...]\n\nDIR is a workflow folder (holding workflow.json) or a folder of them.\nWith no DIR, the embedded example workflows are checked.")
	}
	if err := parseFlags(fset, args); err != nil {
		return err
	}
	failed := false
	report := func(ws []*workflow.Workflow, err error) error {
		for _, w := range ws {
			fmt.Fprintf(stdout, "ok %s (%d agents, %d tools)\n", w.Name, len(w.Agents), len(w.Tools))
		}
		if err != nil {
			var ve workflow.ValidationErrors
			if !errors.As(err, &ve) {
				return err
			}
			failed = true
			fmt.Fprintln(stdout, ve.Error())
		}
		return nil
	}
	if fset.NArg() == 0 {
		if err := report(workflow.LoadAll(workflows.FS)); err != nil {
			return err
		}
	}
	for _, dir := range fset.Args() {
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
