// The AG-UI checks the server's tests run (server/agui_node_test.go), with
// the reference packages @ag-ui/core and @ag-ui/client 1.0.0 installed in
// this directory (npm install; .ci/run does it).
//
//   node check.mjs schema            < events.json   every event (a JSON array) against @ag-ui/core's zod EventSchema
//   node check.mjs client <url> <key> <workflow>   runs the workflow (hello, generator, desk) through @ag-ui/client's HttpAgent
//
// Exit status 0: all good; 1: a check failed (the reasons on stderr). The
// client mode prints, on stdout, a JSON object of what it saw.
import { EventSchema, RunAgentInputSchema } from "@ag-ui/core/schemas";
import { HttpAgent } from "@ag-ui/client";
import { readFileSync } from "node:fs";

const fail = (msg) => {
  process.stderr.write(msg + "\n");
  process.exit(1);
};

// The client warns, and strips the field, for anything the schema does not
// know: for these checks that is a failure.
const warnings = [];
console.warn = (...args) => warnings.push(args.map(String).join(" "));

function checkEvents(events, where) {
  events.forEach((ev, i) => {
    const r = EventSchema.safeParse(ev);
    if (!r.success) fail(`${where} event ${i} (${ev && ev.type}) does not match @ag-ui/core's schema: ${JSON.stringify(r.error.issues)}\n${JSON.stringify(ev)}`);
  });
}

const mode = process.argv[2];
if (mode === "schema") {
  const events = JSON.parse(readFileSync(0, "utf8"));
  checkEvents(events, "stream");
  process.stdout.write(JSON.stringify({ checked: events.length }) + "\n");
  process.exit(0);
}
if (mode !== "client") fail(`usage: node check.mjs schema|client …`);

const [url, key, workflow] = process.argv.slice(3);
const threadId = `thread-${workflow}-${process.pid}`;
const agent = new HttpAgent({ url: `${url}/agui/acme/${workflow}`, headers: { Authorization: `Bearer ${key}` }, threadId });
const runs = [];

async function run(label, tools) {
  const events = [];
  const input = { runId: `${label}-run` };
  if (tools) input.tools = tools;
  let failed;
  const res = await agent.runAgent(input, {
    onEvent: ({ event }) => { events.push(event); },
    onRunFailed: ({ error }) => { failed = error; },
  }).catch((err) => { failed = err; });
  if (failed) fail(`run ${label}: the client refused the stream: ${failed && failed.stack || failed}\nevents: ${JSON.stringify(events)}`);
  if (warnings.length) fail(`run ${label}: the client warned: ${warnings.join("\n")}`);
  checkEvents(events, `run ${label}`);
  const last = events[events.length - 1];
  runs.push({ label, types: events.map((e) => e.type), result: res && res.result, last });
  return { events, last };
}

async function api(path, body) {
  const r = await fetch(url + path, { method: "POST", headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" }, body: JSON.stringify(body) });
  if (r.status >= 300) fail(`POST ${path}: ${r.status} ${await r.text()}`);
}

if (workflow === "hello") {
  await run("hello");
} else if (workflow === "generator") {
  // The interview asks; the person answers; the secret form ends that run
  // (answered in the web UI: here, its HTTP API); the next run goes on to
  // the action plan, a frontend tool call; its result comes back as a
  // tool message; the chat ends.
  await run("ask");
  agent.addMessage({ id: "u-answer", role: "user", content: "A weekly newsletter from our team notes." });
  const secret = await run("answer");
  const waitingSecret = secret.last.result && secret.last.result.waiting === "secret";
  if (!waitingSecret) fail(`run answer: want it to end at the secret form, got ${JSON.stringify(secret.last)}`);
  await api("/api/input/submit", { app: "acme", chat_id: secret.last.result.chat_id, ui_event_id: secret.last.result.ui_event_id, data: { NEWSLETTER_API_KEY: "sk-agui-test" } });
  const plan = await run("plan");
  const pending = plan.last.outcome && plan.last.outcome.pendingToolCallIds;
  if (!pending || pending.length !== 1) fail(`run plan: want one pending frontend tool call, got ${JSON.stringify(plan.last)}`);
  const call = agent.messages.flatMap((m) => m.toolCalls || []).find((c) => c.id === pending[0]);
  if (!call) fail(`run plan: the client has no tool call ${pending[0]} among its messages: ${JSON.stringify(agent.messages)}`);
  agent.addMessage({ id: "t-approve", role: "tool", toolCallId: pending[0], content: JSON.stringify({ action: "approve" }) });
  await run("approve");
} else if (workflow === "desk") {
  // The client offers its get_location tool with every run; Desk calls it
  // (a frontend tool call that ends the run); the client runs it and
  // answers with a tool message in the next run; the chat goes on.
  const tools = [{ name: "get_location", description: "Where the person is, from their browser.",
    parameters: { type: "object", properties: { precision: { enum: ["city", "street"] } }, required: ["precision"] } }];
  agent.addMessage({ id: "u-where", role: "user", content: "Where am I?" });
  const asked = await run("ask", tools);
  const pending = asked.last.outcome && asked.last.outcome.pendingToolCallIds;
  if (!pending || pending.length !== 1) fail(`run ask: want one pending client tool call, got ${JSON.stringify(asked.last)}`);
  const call = agent.messages.flatMap((m) => m.toolCalls || []).find((c) => c.id === pending[0]);
  if (!call || call.function.name !== "get_location") fail(`run ask: the client has no get_location call ${pending[0]}: ${JSON.stringify(agent.messages)}`);
  const args = JSON.parse(call.function.arguments);
  agent.addMessage({ id: "t-where", role: "tool", toolCallId: pending[0], content: `Paris (${args.precision})` });
  await run("answer", tools);
} else {
  fail(`unknown workflow ${workflow}`);
}
const input = { threadId, runId: "echo", messages: agent.messages, tools: [], context: [], state: agent.state };
const ri = RunAgentInputSchema.safeParse(input);
if (!ri.success) fail(`the client's messages are no valid RunAgentInput: ${JSON.stringify(ri.error.issues)}`);
process.stdout.write(JSON.stringify({ threadId, runs, messages: agent.messages, state: agent.state }) + "\n");
