package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/batonhq/baton/chatlog"
	"github.com/batonhq/baton/replay"
)

func init() {
	register(command{
		name:    "eval",
		summary: "run a folder of eval cases against a workflow; JUnit XML for CI",
		usage:   "eval DIR [--workflow DIR] [--model scripted|live] [--parallel N] [--junit FILE] [--json]\n       baton eval --from-export FILE -o CASE",
		about: "Runs each case of DIR (a *.json file: the person's inputs and what the chat must do — final\n" +
			"status, speakers, tool calls with arguments matching a JSON pattern, structured outputs, texts,\n" +
			"context variables; docs/replay.md) in a chat of its own, several at once, on a temporary store,\n" +
			"against the workflow folder --workflow (default: each case's built-in example). Prints a summary\n" +
			"table (a progress bar on a terminal); --junit writes JUnit XML, --json the results as JSON.\n" +
			"Exit status: 0 every case passed, 1 a case failed or could not run, 2 bad usage or cases.\n" +
			"--from-export makes a case of an exported chat (baton export): its inputs, and as expectations\n" +
			"what the chat did.",
		example: "baton eval ./evals --workflow ./workflows/generator --junit eval.xml\n" +
			"baton eval --from-export chat.jsonl -o ./evals/approve.json",
		args:  argDirs,
		flags: evalFlags,
	})
}

type evalOptions struct {
	opts              replay.EvalOptions
	junit, fromExport string
	out               string
	asJSON            bool
}

func evalFlags(fs *flag.FlagSet) runner {
	var o evalOptions
	fs.StringVar(&o.opts.WorkflowDir, "workflow", "", "the workflow folder every case runs (default: the built-in example each case names)")
	fs.StringVar(&o.opts.Model, "model", replay.ModelScripted, "scripted (the folder's scripted.json) or live (the workflow's OpenAI-compatible model)")
	fs.IntVar(&o.opts.Parallel, "parallel", 4, "cases run at once")
	fs.DurationVar(&o.opts.Timeout, "timeout", 2*time.Minute, "give up on a case after this long")
	fs.StringVar(&o.junit, "junit", "", "write the results as JUnit XML to FILE")
	fs.BoolVar(&o.asJSON, "json", false, "print the results as JSON instead of a table")
	fs.StringVar(&o.fromExport, "from-export", "", "make a case of the exported chat FILE (with -o)")
	fs.StringVar(&o.out, "o", "", "with --from-export: write the case to FILE (default: standard output)")
	return func(ctx context.Context, fs *flag.FlagSet, stdout, stderr io.Writer) error {
		args, err := interspersed(fs)
		if err != nil {
			return err
		}
		if o.fromExport != "" {
			if len(args) != 0 {
				fs.Usage()
				return errUsage
			}
			return runEvalFromExport(o.fromExport, o.out, stdout, stderr)
		}
		if len(args) != 1 {
			fs.Usage()
			return errUsage
		}
		if o.opts.Model != replay.ModelScripted && o.opts.Model != replay.ModelLive {
			fmt.Fprintf(stderr, "baton eval: --model %q: want scripted or live\n", o.opts.Model)
			return errUsage
		}
		if o.opts.Parallel < 1 {
			fmt.Fprintln(stderr, "baton eval: --parallel: must be at least 1")
			return errUsage
		}
		return runEval(ctx, o, args[0], stdout, stderr)
	}
}

func runEval(ctx context.Context, o evalOptions, dir string, stdout, stderr io.Writer) error {
	cases, err := replay.LoadCases(dir)
	if err != nil {
		fmt.Fprintf(stderr, "baton eval: %v\n", err)
		return exitError{2}
	}
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) && !o.asJSON {
		o.opts.Progress = func(done, total int, r *replay.Result) { progressBar(stderr, done, total) }
	}
	started := time.Now()
	results, err := replay.Eval(ctx, cases, o.opts)
	if err != nil {
		fmt.Fprintf(stderr, "baton eval: %v\n", err)
		return exitError{2}
	}
	if o.opts.Progress != nil {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if o.junit != "" {
		var b bytes.Buffer
		if err := replay.WriteJUnit(&b, filepath.Base(filepath.Clean(dir)), results, started); err != nil {
			return err
		}
		if err := writeFileAtomic(o.junit, b.Bytes()); err != nil {
			fmt.Fprintf(stderr, "baton eval: --junit: %v\n", err)
			return exitError{2}
		}
	}
	if o.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Summary replay.Summary  `json:"summary"`
			Results []replay.Result `json:"results"`
		}{replay.Summarize(results), results}); err != nil {
			return err
		}
	} else {
		replay.WriteTable(stdout, results)
	}
	if s := replay.Summarize(results); s.Failed+s.Errors > 0 {
		return exitError{1}
	}
	return nil
}

// progressBar redraws a one-line progress bar on a terminal.
func progressBar(w io.Writer, done, total int) {
	const width = 30
	n := done * width / max(total, 1)
	fmt.Fprintf(w, "\r[%s%s] %d/%d", strings.Repeat("#", n), strings.Repeat(" ", width-n), done, total)
}

func runEvalFromExport(file, out string, stdout, stderr io.Writer) error {
	fh, err := os.Open(file)
	if err != nil {
		fmt.Fprintf(stderr, "baton eval: %v\n", err)
		return exitError{2}
	}
	f, err := chatlog.Read(fh)
	fh.Close()
	if err != nil {
		fmt.Fprintf(stderr, "baton eval: %s: %v\n", file, err)
		return exitError{2}
	}
	name := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	if out != "" && out != "-" {
		name = strings.TrimSuffix(filepath.Base(out), filepath.Ext(out))
	}
	b, err := json.MarshalIndent(replay.CaseFromExport(f, name), "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if out == "" || out == "-" {
		_, err := stdout.Write(b)
		return err
	}
	return writeFileAtomic(out, b)
}
