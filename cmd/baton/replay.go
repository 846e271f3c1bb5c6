package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/batonhq/baton/chatlog"
	"github.com/batonhq/baton/replay"
)

func init() {
	register(command{
		name:    "replay",
		summary: "re-run an exported chat against a workflow folder and diff the events",
		usage:   "replay FILE [--workflow DIR] [--model scripted|live]",
		about: "Re-runs the chat FILE holds (baton export) in this process, on a temporary store, against the\n" +
			"workflow folder DIR (default: the built-in example the export names): the same start and inputs\n" +
			"of the person, the recorded model replies while each request matches the recorded one, and the\n" +
			"scripted or live model once the conversation leaves the recording. Then prints the first\n" +
			"divergence of the two event sequences (speakers, texts, handoffs, tool calls and arguments,\n" +
			"structured outputs, context variables, model requests) and the rest of the diff.\n" +
			"Exit status: 0 the same, 1 a divergence, 2 bad usage or a file or workflow that cannot be read.",
		example: "baton replay chat.jsonl --workflow ./workflows/generator\nbaton replay chat.jsonl --workflow ./workflows/generator --model live",
		args:    argDirs,
		flags:   replayFlags,
	})
}

func replayFlags(fs *flag.FlagSet) runner {
	var o replay.Options
	var timeout time.Duration
	fs.StringVar(&o.WorkflowDir, "workflow", "", "the workflow folder to replay against (default: the built-in example the export names)")
	fs.StringVar(&o.Model, "model", replay.ModelScripted, "what answers once the conversation leaves the recording: scripted (the folder's scripted.json) or live (the workflow's OpenAI-compatible model)")
	fs.DurationVar(&timeout, "timeout", 5*time.Minute, "give up after this long")
	return func(ctx context.Context, fs *flag.FlagSet, stdout, stderr io.Writer) error {
		args, err := interspersed(fs)
		if err != nil {
			return err
		}
		if len(args) != 1 {
			fs.Usage()
			return errUsage
		}
		if o.Model != replay.ModelScripted && o.Model != replay.ModelLive {
			fmt.Fprintf(stderr, "baton replay: --model %q: want scripted or live\n", o.Model)
			return errUsage
		}
		return runReplay(ctx, o, args[0], timeout, stdout, stderr)
	}
}

// runReplay is `baton replay`: exit 0 on a match, 1 on a divergence, 2
// when the replay could not run.
func runReplay(ctx context.Context, o replay.Options, file string, timeout time.Duration, stdout, stderr io.Writer) error {
	fail := func(err error) error {
		fmt.Fprintf(stderr, "baton replay: %v\n", err)
		return exitError{2}
	}
	fh, err := os.Open(file)
	if err != nil {
		return fail(err)
	}
	f, err := chatlog.Read(fh)
	fh.Close()
	if err != nil {
		return fail(fmt.Errorf("%s: %w", file, err))
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rep, err := replay.Replay(ctx, f, o)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(stdout, "replay of chat %s (%s, %d events) against %s\n", f.Header.ChatID, f.Header.Workflow, len(f.Records), describeWorkflow(o.WorkflowDir, f.Header.Workflow))
	rep.Write(stdout)
	if rep.Diverged {
		return exitError{1}
	}
	return nil
}

func describeWorkflow(dir, name string) string {
	if dir == "" {
		return "the built-in example " + name
	}
	return dir
}
