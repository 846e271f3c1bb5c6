// Package tool is baton's tool registry. [New] turns a workflow's tools.json
// entries ([Spec]) into [baton.Tool]s of five kinds and runs every call
// through one path.
//
// # Kinds
//
//   - go: a Go function registered with [WithFuncs], made with [Func]; its
//     parameter schema is derived from the argument struct.
//   - command: an executable under the workflow's tools/ folder, in any
//     language. It reads the arguments JSON on stdin and gets BATON_CHAT_ID,
//     BATON_APP, BATON_USER, BATON_WORKFLOW, BATON_AGENT, BATON_TURN_KEY,
//     BATON_TOOL_CALL_ID, BATON_TOOL_NAME, BATON_FUNCTION, BATON_EFFECT_KEY
//     and BATON_CONTEXT (the context variables as JSON) in its environment,
//     with PATH, HOME, TMPDIR, LANG, LC_ALL, TZ, the variables its spec's Env
//     lists and the call's secrets — nothing else of baton's environment. It
//     writes its result on stdout (below). stderr is logged line by line,
//     capped; a non-zero exit is a tool error carrying the last stderr
//     lines. The command runs in its own process group, killed whole at the
//     timeout and when the command exits, so no child outlives the call.
//   - http: the arguments JSON is POSTed to the spec's URL, with headers from
//     the spec (${VAR} and headers_from_env name secrets or environment
//     variables, so no secret is written in tools.json), Idempotency-Key set
//     to the effect key and X-Baton-Chat-Id, X-Baton-Workflow, X-Baton-Agent
//     and X-Baton-Tool-Call-Id. The body is the result (below), read up to
//     the output cap; a 4xx or 5xx status is a tool error.
//   - mcp: the tools of an MCP server declared in workflow.json's
//     mcp_servers, over stdio (a command) or streamable HTTP (a URL): all of
//     them or the listed ones, optionally prefixed, each with the server's
//     own description and schema. One session per server is started on
//     first need and shared; a call that fails because the server crashed is
//     a tool error, and the next call starts the server again.
//   - ui: a UI_Tool. Its call returns at once with Status
//     [baton.ToolStatusPending] and a [UIRequest] (component, mode, the
//     arguments as payload, a ui_event_id) as the UI payload. Showing it,
//     pausing the chat and resuming on the person's ui.tool.response belong
//     to the engine; [UIResult] ({status, ui_event_id, data}) turns the
//     response into the tool's final result.
//
// A command's stdout and an http tool's body are either a result object
//
//	{"content": "for the model" | any JSON, "status": "ok" | "error",
//	 "ui": {…}, "context_updates": {"variable": value, …}}
//
// (a JSON object with "content" and no other keys than these four) or any
// other text, which is the content as it is.
//
// # The call path
//
//  1. The arguments are validated against the tool's JSON Schema
//     (santhosh-tekuri/jsonschema); invalid arguments are a tool error whose
//     content names each problem and where it is, so the model can correct
//     itself. Schemas may not load external $refs.
//  2. A tool marked side_effects runs through the effect ledger ([Once]).
//  3. At most MaxConcurrency calls of one tool run at once (default
//     [DefaultMaxConcurrency]); a call waits for a slot within its timeout.
//  4. Every call has a timeout (default [DefaultTimeout]); passing it is a
//     tool error. A panic in a Go tool is a tool error. Content is capped at
//     [DefaultMaxOutput] bytes and marked as truncated beyond.
//  5. Context-variable updates (CallContext.Vars.Set, or context_updates)
//     are returned in ToolResult.Updates for the engine to apply (only to
//     declared, non-derived variables not named "__…", of their declared
//     type). Secret values are redacted from the content, the updates and
//     the ui object (JSON decoded, so any escaping of a secret is found).
//  6. A tool.executed (status ok or pending) or tool.error event with the
//     tool, agent, call id, status, duration_ms and whether the result was
//     replayed is published to the [Publisher]; publishing never fails or
//     holds up the call.
//
// A tool error for the model is a [baton.ToolResult] with Status "error"; a
// Go error from Call means the call could not be made or its outcome is
// unknown (the caller's context ended, an effect is in flight elsewhere).
//
// # Exactly-once side effects
//
// A side_effects tool is called through the effect ledger with the key
// [baton.EffectKey](chat, turn key, tool-call id). The first call claims the
// key, runs, and records its result — ok or error, whatever the model saw.
// Any later call with the key — a replayed or resumed turn, a retry, another
// instance — gets the recorded result back without running the tool.
// Concurrent calls with one key in a process share one execution.
//
// If a process dies after claiming and before recording, the key is left
// pending and nobody knows whether the effect happened. A call that finds a
// pending claim younger than the tool's timeout plus a grace period returns
// an ECONFLICT error (the first call may still be running elsewhere; retry
// later). An older pending claim was abandoned: the tool runs once more
// with the same effect key, and that result is recorded. So the crash window
// is at-least-once, and a tool that must never act twice de-duplicates on
// the key, which every kind receives: CallContext.EffectKey for Go tools,
// BATON_EFFECT_KEY for commands, the Idempotency-Key header for HTTP tools
// and _meta "baton/effect_key" for MCP tools.
package tool
