package replay

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/chatlog"
)

// Options say how Replay runs a recorded chat.
type Options struct {
	// WorkflowDir is the workflow folder to replay against; empty means
	// the built-in example the export names.
	WorkflowDir string
	// Model is what answers once the conversation leaves the recording:
	// ModelScripted (the default) or ModelLive.
	Model string
	// Log receives the runtime's log; nil discards it.
	Log *slog.Logger
}

// Report is what a replay found.
type Report struct {
	// Ops is the diff of the recorded and the replayed steps.
	Ops []Op
	// Diverged is true when the replay did not record the same steps.
	Diverged bool
	// Model is where the model calls left the recording (nil: never), and
	// Served how many of the Calls recorded ones were answered from it.
	Model         *Divergence
	Served, Calls int
	// Inputs is how many recorded inputs there were, Used how many the
	// replay gave; Stuck says why it stopped giving them early.
	Inputs, Used int
	Stuck        string
	// ChatID is the replayed chat's id.
	ChatID string
}

// Replay re-runs a recorded chat against the workflow of o: the same
// start, the same inputs of the person (each given when the chat waits for
// that kind of input), the recorded model replies while the requests match
// the recorded ones (Recorded), the fallback model after. Then it compares
// the event sequences (Steps, Diff). An error means the replay could not
// run (an export of the client view, a workflow that does not load, ctx).
func Replay(ctx context.Context, f *chatlog.File, o Options) (*Report, error) {
	if f.Header.View != chatlog.ViewFull {
		return nil, baton.Errorf(baton.EINVALID, "this export holds the %s view only (what the chat's person sees); a replay needs the full one: export the chat with baton export, or from a server run with --export-full", f.Header.View)
	}
	calls := f.Calls()
	rec := NewRecorded(calls, nil)
	e, err := openEnv(ctx, envOptions{
		WorkflowDir: o.WorkflowDir, Name: f.Header.Workflow, Model: o.Model, Log: o.Log,
		Wrap: func(p baton.Provider) baton.Provider { rec.Fallback = p; return rec },
	})
	if err != nil {
		return nil, err
	}
	defer e.close()
	start, inputs := f.Inputs()
	out, err := Drive(ctx, e.rt, baton.Scope{App: "replay", User: "replay"}, e.wf.Name, Script{
		Message: start, Context: startContext(e.wf, f.Header.StartContext), Inputs: inputs,
	})
	if err != nil {
		return nil, err
	}
	want := make([]baton.Event, len(f.Records))
	for i := range f.Records {
		want[i] = f.Records[i].Event(f.Header.ChatID)
	}
	ops := Diff(Steps(want), Steps(out.Events))
	return &Report{
		Ops: ops, Diverged: Diverged(ops) || out.Stuck != "", Model: rec.Diverged(), Served: rec.Served(), Calls: len(calls),
		Inputs: len(inputs), Used: out.Used, Stuck: out.Stuck, ChatID: out.ChatID,
	}, nil
}

// Write prints the report for people: the model's and the inputs' story,
// then the diff.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "model calls: %d of %d answered from the recording", r.Served, r.Calls)
	if r.Model != nil {
		fmt.Fprintf(w, "; from recorded call %d on (%s) the fallback model answered: %s", r.Model.Call+1, r.Model.Agent, r.Model.Reason)
	}
	fmt.Fprintf(w, "\ninputs: %d of %d given", r.Used, r.Inputs)
	if r.Stuck != "" {
		fmt.Fprintf(w, "; stopped: %s", r.Stuck)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
	WriteDiff(w, r.Ops)
}
