package replay

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/runtime"
	"github.com/batonhq/baton/workflow"
)

// Models a replay or an eval can fall back to or run with.
const (
	// ModelScripted is the workflow folder's scripted.json: offline, the
	// same on every run.
	ModelScripted = "scripted"
	// ModelLive is the workflow's OpenAI-compatible model (llm.api_key_env
	// or llm.base_url_env must be set).
	ModelLive = "live"
)

// env is an in-process runtime on a temporary SQLite store, running one
// workflow: a copy of a workflow folder, or one of the embedded examples.
type env struct {
	rt  *runtime.Runtime
	wf  *workflow.Workflow
	dir string
}

// envOptions say what an env runs.
type envOptions struct {
	// WorkflowDir is a workflow folder; empty means the embedded example
	// named Name.
	WorkflowDir, Name string
	// Model is ModelScripted or ModelLive; Wrap, when set, wraps the
	// provider chosen (a Recorded around it).
	Model string
	Wrap  func(baton.Provider) baton.Provider
	Log   *slog.Logger
}

// openEnv opens the runtime; close it with env.close.
func openEnv(ctx context.Context, o envOptions) (_ *env, err error) {
	if o.Model == "" {
		o.Model = ModelScripted
	}
	if o.Model != ModelScripted && o.Model != ModelLive {
		return nil, baton.Errorf(baton.EINVALID, "model: %q, want %s or %s", o.Model, ModelScripted, ModelLive)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	dir, err := os.MkdirTemp("", "baton-replay-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	cfg := runtime.Config{StoreURL: "sqlite:" + filepath.Join(dir, "replay.db"), SecretKey: key, Logger: o.Log, StateCache: -1}
	if o.WorkflowDir != "" {
		// The folder is copied under a folder of its own, so that the
		// runtime loads it alone and its command tools run from disk.
		root := filepath.Join(dir, "workflows")
		name := o.Name
		if name == "" {
			name = filepath.Base(filepath.Clean(o.WorkflowDir))
		}
		if err := os.CopyFS(filepath.Join(root, name), os.DirFS(o.WorkflowDir)); err != nil {
			return nil, fmt.Errorf("workflow %s: %w", o.WorkflowDir, err)
		}
		cfg.WorkflowsDir = root
	} else {
		cfg.DataDir = dir // the embedded examples are extracted there
	}
	def := runtime.DefaultProviders(o.Log)
	cfg.Providers = func(wf *workflow.Workflow) (baton.Provider, error) {
		var p baton.Provider
		if o.Model == ModelLive {
			keyEnv, urlEnv := wf.Config.LLM.APIKeyEnv, wf.Config.LLM.BaseURLEnv
			if keyEnv == "" {
				keyEnv = "OPENAI_API_KEY"
			}
			if urlEnv == "" {
				urlEnv = "OPENAI_BASE_URL"
			}
			if os.Getenv(keyEnv) == "" && os.Getenv(urlEnv) == "" {
				return nil, baton.Errorf(baton.EINVALID, "--model live: workflow %s's model needs %s or %s set", wf.Name, keyEnv, urlEnv)
			}
			if p, err = def(wf); err != nil {
				return nil, err
			}
		} else if p, err = scripted.Load(wf.FS, path.Join(wf.Dir, "scripted.json")); err != nil {
			return nil, fmt.Errorf("workflow %s: --model scripted: %w", wf.Name, err)
		}
		if o.Wrap != nil && (o.WorkflowDir != "" || wf.Name == o.Name) {
			p = o.Wrap(p)
		}
		return p, nil
	}
	rt, err := runtime.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	e := &env{rt: rt, dir: dir}
	for _, wf := range rt.Workflows() {
		if o.WorkflowDir != "" || wf.Name == o.Name {
			e.wf = wf
			break
		}
	}
	if e.wf == nil {
		e.close()
		return nil, baton.Errorf(baton.ENOTFOUND, "workflow %q: not one of the built-in examples (give its folder with --workflow)", o.Name)
	}
	// The engine asks for a provider when a chat first calls the model; a
	// script that does not load fails here, before any chat starts.
	if _, err := cfg.Providers(e.wf); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// close closes the runtime and removes its files.
func (e *env) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = e.rt.Close(ctx)
	os.RemoveAll(e.dir)
}
