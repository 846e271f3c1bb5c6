package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/chatlog"
	"github.com/batonhq/baton/server"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/workflow"
	"github.com/batonhq/baton/workflows"
)

func init() {
	register(command{
		name:    "export",
		summary: "write a chat's recorded events to a file (or as a scripted.json)",
		usage:   "export CHAT_ID [--app A] [--user U] [--scripted] [-o FILE] [flags]",
		about: "Reads the chat from the store `baton serve` uses and writes every event the engine recorded,\n" +
			"one envelope per line after a header line (docs/replay.md): the file baton replay and\n" +
			"baton eval --from-export read. Hidden messages and internal agents' texts are in it (the model\n" +
			"saw them); secrets never are. --scripted writes a scripted.json instead, whose replies are the\n" +
			"chat's model replies: a real chat becomes an offline fixture. Writes to standard output without -o.",
		example: "baton export 01a2149e-5f09-7eae-b7e9-6026f28fd384 -o chat.jsonl\n" +
			"baton export 01a2149e-5f09-7eae-b7e9-6026f28fd384 --scripted -o workflows/generator/scripted.json",
		flags: exportFlags,
	})
}

// exportOptions are the flags of `baton export`.
type exportOptions struct {
	storeURL, dataDir, workflowsDir, app, user, out string
	scripted                                        bool
}

func exportFlags(fs *flag.FlagSet) runner {
	var o exportOptions
	fs.StringVar(&o.storeURL, "store", envOr("BATON_STORE", ""), "store: sqlite:PATH or postgres://… (env BATON_STORE; default sqlite under --data-dir)")
	fs.StringVar(&o.dataDir, "data-dir", envOr("BATON_DATA_DIR", ".baton"), "where baton keeps its files (env BATON_DATA_DIR)")
	fs.StringVar(&o.workflowsDir, "workflows", envOr("BATON_WORKFLOWS", ""), "folder of workflow folders, for the agents' flags in the envelopes (env BATON_WORKFLOWS; default: the built-in examples)")
	fs.StringVar(&o.app, "app", envOr("BATON_APP", server.DefaultApp), "the chat's app (env BATON_APP)")
	fs.StringVar(&o.user, "user", envOr("BATON_USER", server.DevUser), "the chat's user (env BATON_USER)")
	fs.BoolVar(&o.scripted, "scripted", false, "write a scripted.json of the chat's model replies and the person's inputs")
	fs.StringVar(&o.out, "o", "", "write to FILE instead of standard output")
	return func(ctx context.Context, fs *flag.FlagSet, stdout, stderr io.Writer) error {
		args, err := interspersed(fs)
		if err != nil {
			return err
		}
		if len(args) != 1 {
			fs.Usage()
			return errUsage
		}
		return runExport(ctx, o, args[0], stdout)
	}
}

// interspersed returns the positional arguments of fs, parsing the flags
// that follow them too (flag stops at the first argument).
func interspersed(fs *flag.FlagSet) ([]string, error) {
	var args []string
	for fs.NArg() > 0 {
		rest := fs.Args()
		args = append(args, rest[0])
		if err := parseFlags(fs, rest[1:]); err != nil {
			return nil, err
		}
	}
	return args, nil
}

func runExport(ctx context.Context, o exportOptions, chatID string, stdout io.Writer) error {
	storeURL := o.storeURL
	if storeURL == "" {
		storeURL = "sqlite:" + filepath.Join(o.dataDir, "baton.db")
	}
	if strings.HasPrefix(storeURL, "mem:") {
		return fmt.Errorf("--store %s: a memory store holds no chat of another process; give the store baton serve uses", storeURL)
	}
	st, err := store.Open(ctx, storeURL)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer st.Close()
	scope := baton.Scope{App: o.app, User: o.user}
	chat, err := st.GetChat(ctx, scope, chatID)
	if err != nil {
		if baton.ErrorCode(err) == baton.ENOTFOUND {
			return fmt.Errorf("chat %s: not found for app %q, user %q (--app, --user)", chatID, o.app, o.user)
		}
		return err
	}
	var buf bytes.Buffer
	if err := chatlog.Export(ctx, st, scope, chat.ID, &buf, chatlog.ExportOptions{Workflow: findWorkflow(o.workflowsDir, chat.Workflow)}); err != nil {
		return err
	}
	data := buf.Bytes()
	if o.scripted {
		f, err := chatlog.Read(bytes.NewReader(data))
		if err != nil {
			return err
		}
		if data, err = f.Scripted(); err != nil {
			return err
		}
	}
	if o.out == "" || o.out == "-" {
		_, err := stdout.Write(data)
		return err
	}
	return writeFileAtomic(o.out, data)
}

// findWorkflow loads the workflow named name from dir (a folder of
// workflow folders) or the built-in examples; nil when it is not there or
// does not load (the export then carries no agent flags).
func findWorkflow(dir, name string) *workflow.Workflow {
	var wfs []*workflow.Workflow
	if dir != "" {
		wf, err := workflow.Load(os.DirFS(dir), name)
		if err == nil {
			return wf
		}
		return nil
	}
	wfs, _ = workflow.LoadAll(workflows.FS)
	for _, wf := range wfs {
		if wf.Name == name {
			return wf
		}
	}
	return nil
}

// writeFileAtomic writes data to path through a temporary file, so that a
// failed write leaves no half file.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
