package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/workflow"
)

// Background tasks: work that outlives the turn that started it — a Go
// function registered in Config.Tasks, or a workflow's command tool run in
// the background. A task is persisted (queued, running, completed, failed)
// in the store; when it ends, background_task.completed or .failed is
// published with the chat as trigger_session_id, which wakes the chat
// through the event-handler agent even when it is paused and holds no
// goroutine. Tasks still running when the process stops are marked failed
// at the next start (RecoverTasks) and reported the same way.
//
// With several instances (Config.InstanceID) a task belongs to the instance
// that started it: the task row carries the instance as its owner and an
// expiry the owner renews every lease TTL/3 (Engine.Run). A task whose
// owner stopped renewing — the instance died — is reported failed by
// whichever instance's sweep finds it first; an instance restarting under
// the same id reports its own unfinished tasks at once (RecoverTasks). A
// report found by two sweeps at once is published under one event id, so
// the chat handles it once.

// TaskFunc runs a background task. It should return when ctx ends.
type TaskFunc func(ctx context.Context, input json.RawMessage) (json.RawMessage, error)

// DefaultMaxTasks is how many background tasks run at once by default.
const DefaultMaxTasks = 16

// taskRunner owns the goroutines of running tasks.
type taskRunner struct {
	e      *Engine
	funcs  map[string]TaskFunc
	slots  chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (tr *taskRunner) init(e *Engine, funcs map[string]TaskFunc, max int) {
	if max <= 0 {
		max = DefaultMaxTasks
	}
	tr.e, tr.funcs, tr.slots = e, funcs, make(chan struct{}, max)
	tr.ctx, tr.cancel = context.WithCancel(context.Background())
}

// stop cancels the running tasks and waits for their goroutines. They stay
// "running" in the store; RecoverTasks reports them at the next start.
func (tr *taskRunner) stop() {
	tr.cancel()
	tr.wg.Wait()
}

// StartTask starts the named task for a chat and returns it, queued. name
// is a function of Config.Tasks or a command tool of the chat's workflow.
func (e *Engine) StartTask(ctx context.Context, scope baton.Scope, chatID, name string, input json.RawMessage) (baton.Task, error) {
	return e.startTask(ctx, scope, chatID, name, input, "")
}

// taskIDFor is the id of the task a start_background_task call starts: the
// same for every replay of the call (its effect key), so that a call run
// again — its run lost the lease, or its instance died, after the task was
// created but before the call's result was recorded — finds its task
// instead of starting a second one.
func taskIDFor(effectKey string) string {
	return "task_" + uuid.NewSHA1(uuid.NameSpaceURL, []byte("baton:task:"+effectKey)).String()
}

// startTask is StartTask with a task id; an empty id is a fresh one. A task
// with that id that exists already is returned as it is, not started again.
func (e *Engine) startTask(ctx context.Context, scope baton.Scope, chatID, name string, input json.RawMessage, id string) (baton.Task, error) {
	chat, err := e.store.GetChat(ctx, scope, chatID)
	if err != nil {
		return baton.Task{}, err
	}
	fn, err := e.taskFunc(chat, name)
	if err != nil {
		return baton.Task{}, err
	}
	if len(input) == 0 {
		input = json.RawMessage(`{}`)
	}
	task := baton.Task{ID: id, ChatID: chatID, Kind: name, Status: baton.TaskQueued, Input: input}
	if e.instance != "" {
		task.Owner, task.Expires = e.instance, time.Now().Add(e.leaseTTL)
	}
	t, err := e.store.CreateTask(ctx, scope, task)
	if id != "" && errors.Is(err, baton.ErrConflict) {
		// Started by an earlier run of the same call: it runs, or ran,
		// where it was started (a dead owner's is reported failed).
		if t, err := e.store.GetTask(ctx, scope, id); err == nil {
			e.log.Info("task: already started by an earlier run of its call; not started again", "task_id", id, "chat_id", chatID)
			return t, nil
		}
	}
	if err != nil {
		return baton.Task{}, fmt.Errorf("start task %s: %w", name, err)
	}
	tr := &e.tasks
	tr.wg.Add(1)
	go func() {
		defer tr.wg.Done()
		select {
		case tr.slots <- struct{}{}:
		case <-tr.ctx.Done():
			return
		}
		defer func() { <-tr.slots }()
		e.runTask(tr.ctx, scope, t, fn)
	}()
	return t, nil
}

func (e *Engine) runTask(ctx context.Context, scope baton.Scope, t baton.Task, fn TaskFunc) {
	if _, err := e.store.UpdateTask(ctx, scope, t.ID, baton.TaskRunning, nil, ""); errors.Is(err, baton.ErrConflict) {
		return // already ended: reported failed by another instance while it waited
	} else if err != nil {
		e.log.Warn("task: mark running", "task_id", t.ID, "err", err)
	}
	result, err := fn(ctx, t.Input)
	if ctx.Err() != nil {
		return // shutting down: RecoverTasks reports it after the restart
	}
	// The outcome is recorded with a fresh context: the task's may be over.
	rctx, cancel := context.WithTimeout(context.Background(), defaultRecordTimeout)
	defer cancel()
	if err != nil {
		e.finishTask(rctx, scope, t, nil, err.Error())
		return
	}
	e.finishTask(rctx, scope, t, result, "")
}

// finishTask records a task's outcome and publishes its event.
func (e *Engine) finishTask(ctx context.Context, scope baton.Scope, t baton.Task, result json.RawMessage, errMsg string) {
	status, typ := baton.TaskCompleted, baton.TypeBackgroundTaskCompleted
	payload := map[string]any{"taskId": t.ID, "task": t.Kind, "result": result}
	if errMsg != "" {
		status, typ = baton.TaskFailed, baton.TypeBackgroundTaskFailed
		payload = map[string]any{"taskId": t.ID, "task": t.Kind, "error": errMsg}
	}
	if _, err := e.store.UpdateTask(ctx, scope, t.ID, status, result, errMsg); errors.Is(err, baton.ErrConflict) {
		// Its outcome is recorded already — another instance reported it
		// failed while this one was late to renew it: report nothing more.
		e.log.Info("task: outcome already recorded; not reported again", "task_id", t.ID, "err", err)
		return
	} else if err != nil {
		e.log.Warn("task: record outcome", "task_id", t.ID, "err", err)
	}
	raw, _ := json.Marshal(payload)
	ev := baton.NewInput(scope, typ, t.ChatID, raw)
	ev.ID = "task_" + t.ID + "_" + string(status) // one event per outcome, however often it is reported
	ev.Metadata.Source = baton.SourceTool
	if err := e.bus.Publish(ctx, ev); err != nil {
		e.log.Warn("task: publish outcome", "task_id", t.ID, "err", err)
	}
}

// RecoverTasks marks the tasks a stopped process left queued or running as
// failed and reports each to its chat. Call it once at start. With an
// instance id it takes only this instance's own tasks (it restarted, so they
// are dead) and those whose owner's renewal lapsed; the others belong to
// live instances.
func (e *Engine) RecoverTasks(ctx context.Context) (int, error) {
	return e.failTasks(ctx, time.Now(), true, "the process stopped")
}

// failTasks reports as failed the unfinished tasks no live process runs:
// with an instance id, those whose owner's renewal lapsed, and this
// instance's own when own is set (it just started, so they are dead).
func (e *Engine) failTasks(ctx context.Context, now time.Time, own bool, why string) (int, error) {
	n := 0
	for _, status := range []baton.TaskStatus{baton.TaskRunning, baton.TaskQueued} {
		list, err := e.store.TasksByStatus(ctx, status, 100000)
		if err != nil {
			return n, fmt.Errorf("recover tasks: %w", err)
		}
		for _, t := range list {
			if e.instance != "" {
				// Our own tasks are dead only if an earlier process of this
				// instance started them: inputs may start tasks here before
				// RecoverTasks runs.
				mine := t.Owner == e.instance
				ownDead := mine && own && t.CreatedAt.Before(e.born)
				orphan := t.Owner != "" && !mine && !now.Before(t.Expires)
				if !ownDead && !orphan {
					continue // running here, a live instance's, or a single process's of an older setup
				}
			}
			e.finishTask(ctx, baton.Scope{App: t.App, User: t.User}, t, nil, "interrupted: "+why+" while the task was "+string(status))
			n++
		}
	}
	return n, nil
}

// renewTasks extends this instance's unfinished tasks and reports other
// instances' orphaned ones. Engine.Run calls it every lease TTL/3.
func (e *Engine) renewTasks(ctx context.Context, now time.Time) error {
	if _, err := e.store.TouchTasks(ctx, e.instance, e.leaseTTL); err != nil {
		return fmt.Errorf("renew tasks: %w", err)
	}
	n, err := e.failTasks(ctx, now, false, "its instance stopped")
	if n > 0 {
		e.log.Info("engine: reported background tasks of a dead instance as failed", "count", n, "instance", e.instance)
	}
	return err
}

// taskFunc resolves a task name for a chat.
func (e *Engine) taskFunc(chat baton.Chat, name string) (TaskFunc, error) {
	if fn, ok := e.tasks.funcs[name]; ok {
		return fn, nil
	}
	wf := e.workflows[chat.Workflow]
	if wf == nil {
		return nil, baton.Errorf(baton.ENOTFOUND, "workflow %q: not loaded", chat.Workflow)
	}
	wt := wf.Tool(name)
	if wt == nil || wt.Kind != workflow.KindCommand {
		return nil, baton.Errorf(baton.ENOTFOUND, "task %q: not a registered task nor a command tool of workflow %s", name, wf.Name)
	}
	reg, err := e.registry(wf)
	if err != nil {
		return nil, err
	}
	tl, err := reg.Tool(context.Background(), wt.Agent, name)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
		res, err := tl.Call(ctx, &baton.CallContext{ChatID: chat.ID, App: chat.App, User: chat.User, Workflow: wf.Name, Agent: wt.Agent}, input)
		if err != nil {
			return nil, err
		}
		if !res.OK() {
			return nil, fmt.Errorf("%s", res.Content)
		}
		out, _ := json.Marshal(res.Content)
		return out, nil
	}, nil
}

// startTaskTool is the built-in start_background_task tool.
func (e *Engine) startTaskTool() baton.Tool {
	type args struct {
		Task  string         `json:"task" jsonschema:"the task to start: a registered task or a command tool of this workflow"`
		Input map[string]any `json:"input,omitempty" jsonschema:"the task's input, a JSON object"`
	}
	return tool.MustFunc(ToolStartBackgroundTask, "Start work that goes on after this turn; you will be told when it completes or fails.",
		func(ctx context.Context, cc *baton.CallContext, in args) (map[string]string, error) {
			input, _ := json.Marshal(in.Input) // a decoded object always marshals
			id := ""
			if cc.EffectKey != "" {
				id = taskIDFor(cc.EffectKey)
			}
			t, err := e.startTask(ctx, baton.Scope{App: cc.App, User: cc.User}, cc.ChatID, in.Task, input, id)
			if err != nil {
				return nil, err
			}
			return map[string]string{"task_id": t.ID, "status": string(t.Status)}, nil
		})
}

// defaultRecordTimeout bounds recording a task's outcome.
const defaultRecordTimeout = 30 * time.Second
