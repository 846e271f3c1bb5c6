// The openai npm client against baton's OpenAI Chat Completions API, run
// by TestChatCompletions_NodeClient with BATON_URL and BATON_KEY set (the
// server's test workflows: notify answers twice). It prints one JSON
// object of what it saw; the Go test checks it and the store.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.BATON_URL + "/v1", apiKey: process.env.BATON_KEY, maxRetries: 0 });
const out = {};

const models = await client.models.list();
out.models = models.data.map((m) => m.id);

// A new conversation, not streamed.
const history = [{ role: "user", content: "Is my report ready?" }];
const { data: first, response } = await client.chat.completions
  .create({ model: "notify", messages: history })
  .withResponse();
out.first = { id: first.id, object: first.object, content: first.choices[0].message.content, finish: first.choices[0].finish_reason, chatID: response.headers.get("x-baton-chat-id") };

// The whole history again with the next message, streamed: the same chat.
history.push(first.choices[0].message, { role: "user", content: "Please check the weekly one." });
const stream = await client.chat.completions.create({ model: "notify", messages: history, stream: true, stream_options: { include_usage: true } });
let content = "", finish = null, usage = null, chunks = 0, ids = new Set(), chatIDs = new Set();
for await (const chunk of stream) {
  chunks++;
  ids.add(chunk.id);
  chatIDs.add(chunk.chat_id);
  if (chunk.object !== "chat.completion.chunk") throw new Error("chunk object " + chunk.object);
  for (const c of chunk.choices) {
    content += c.delta.content ?? "";
    finish = c.finish_reason ?? finish;
  }
  if (chunk.usage) usage = chunk.usage;
}
out.second = { content, finish, usage, chunks, ids: ids.size, chatIDs: [...chatIDs] };

// The same streamed request once more: the recorded reply, nothing new.
const again = await client.chat.completions.create({ model: "notify", messages: history });
out.again = { content: again.choices[0].message.content, id: again.id };

// Errors in OpenAI's shape, as the client's error classes.
const errorOf = async (f) => {
  try {
    await f();
    return null;
  } catch (e) {
    return { name: e.constructor.name, status: e.status, code: e.code, param: e.param, type: e.type };
  }
};
out.badModel = await errorOf(() => client.chat.completions.create({ model: "nope", messages: [{ role: "user", content: "hi" }] }));
out.badKey = await errorOf(() =>
  new OpenAI({ baseURL: process.env.BATON_URL + "/v1", apiKey: "bk_wrong", maxRetries: 0 }).chat.completions.create({ model: "notify", messages: [{ role: "user", content: "hi" }] }),
);
out.badRole = await errorOf(() => client.chat.completions.create({ model: "notify", messages: [{ role: "wizard", content: "hi" }] }));
out.tooLarge = await errorOf(() => client.chat.completions.create({ model: "notify", messages: [{ role: "user", content: "x".repeat(2 << 20) }] }));

console.log(JSON.stringify(out));
