// The official TypeScript MCP SDK client against a running Switchboard, driven by test_interop.py.
//
// The plan (ids, URLs, credentials) comes as JSON in INTEROP_PLAN. Every call's outcome is recorded
// as the client hands it over: a success's structuredContent, a refusal's parsed text with its raw
// text and whether it carried structuredContent, or a thrown error's name, code and message. The
// record is one JSON line on stdout at the end. Midway it prints {"waiting": "push"} and waits for a
// line on stdin: the test pushes a todo onto the subscribed queue then.
import { createInterface } from "node:readline";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const plan = JSON.parse(process.env.INTEROP_PLAN);
const out = {};
const stdin = createInterface({ input: process.stdin });
const lines = stdin[Symbol.asyncIterator]();

async function connect(url, credential) {
  const client = new Client({ name: "interop", version: "1.0.0" });
  const headers = { Authorization: `Bearer ${credential}` };
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
  return client;
}

function thrown(err) {
  return { thrown: true, name: err?.constructor?.name ?? typeof err, code: err?.code ?? null,
           message: String(err?.message ?? err) };
}

async function call(client, name, args) {
  try {
    const r = await client.callTool({ name, arguments: args });
    if (r.isError) {
      const text = r.content[0].text;
      return { isError: true, text, structured: r.structuredContent !== undefined, ...JSON.parse(text) };
    }
    return { isError: false, ...r.structuredContent };
  } catch (err) {
    return thrown(err);
  }
}

const a = await connect(plan.a.url, plan.a.credential);
out.server = a.getServerVersion();
out.instructions = (a.getInstructions() ?? "").includes("Lease contract");
// Listing the tools makes the client check every later result against the tool's outputSchema.
out.tools = (await a.listTools()).tools.map((t) => ({ name: t.name, outputSchema: Boolean(t.outputSchema) }));
out.resources = (await a.listResources()).resources.map((r) => r.uri);

// Drain: claim_next + complete until empty.
out.drained = [];
for (;;) {
  const got = await call(a, "claim_next", { queue: "work", claimant: "interop/drain" });
  if (got.thrown || got.isError || got.empty) { out.drain_end = got; break; }
  const done = await call(a, "complete", { id: got.todo.id, summary: "done by the TypeScript client" });
  out.drained.push({ id: got.todo.id, title: got.todo.title, state: done.state ?? done });
}

// invalid naming the argument
out.invalid_ttl = await call(a, "claim_next", { lease_ttl_seconds: "ten" });
out.invalid_unknown = await call(a, "claim_next", { nonsense: 1 });
out.invalid_missing = await call(a, "get_todo", {});

// not_found: a foreign id and an unknown id, for every verb taking an id
out.not_found = {};
for (const verb of ["get_todo", "claim", "heartbeat", "complete", "fail", "release", "request_input"]) {
  out.not_found[verb] = { foreign: await call(a, verb, { id: plan.foreign_id }),
                          unknown: await call(a, verb, { id: plan.unknown_id }) };
}

// conflict: a fenced lease with a wrong token, then a claim of a held todo; the right token works.
const fenced = await call(a, "claim", { id: plan.ids.fenced, require_fence: true, claimant: "interop/fence" });
out.fenced_claim = { attempt_seq: fenced.attempt_seq, has_token: typeof fenced.lease_token === "string" };
out.conflict_token = await call(a, "heartbeat", { id: plan.ids.fenced, lease_token: "not-the-token" });
out.conflict_missing_token = await call(a, "complete", { id: plan.ids.fenced });
out.conflict_held = await call(a, "claim", { id: plan.ids.fenced });
out.fenced_complete = await call(a, "complete", { id: plan.ids.fenced, lease_token: fenced.lease_token,
                                                   summary: "fenced and done" });

// fail: a retry, then the dead letter at the cap
await call(a, "claim", { id: plan.ids.retry });
out.fail_retry = await call(a, "fail", { id: plan.ids.retry, summary: "first try broke" });
out.reclaim = await call(a, "claim", { id: plan.ids.retry });
out.fail_dead = await call(a, "fail", { id: plan.ids.retry, summary: "second try broke" });
out.fail_history = await call(a, "get_todo", { id: plan.ids.retry });

// release and request_input
await call(a, "claim", { id: plan.ids.release });
out.release = await call(a, "release", { id: plan.ids.release, summary: "handing it back" });
await call(a, "claim", { id: plan.ids.ask });
out.request_input = await call(a, "request_input", { id: plan.ids.ask, question: "which branch?" });
out.invalid_artifact = await call(a, "complete", { id: plan.ids.release, artifact: "ftp://example.org/x" });

// forbidden: a verb outside the endpoint's scope, and a queue outside it
const c = await connect(plan.c.url, plan.c.credential);
out.scoped_tools = (await c.listTools()).tools.map((t) => t.name);
out.forbidden_verb = await call(c, "complete", { id: plan.ids.release });
out.forbidden_queue = await call(a, "claim_next", { queue: "not-granted" });
await c.close();

// The doorbell: subscribe, have a todo pushed, wait for notifications/resources/updated.
const updated = new Promise((resolve) => {
  a.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => resolve(n.params.uri));
});
await a.subscribeResource({ uri: "switchboard://queues/inbox" });
console.log(JSON.stringify({ waiting: "push" }));
await lines.next();
let timer;
const timeout = new Promise((resolve) => { timer = setTimeout(() => resolve(null), 10000); });
out.updated = await Promise.race([updated, timeout]);
clearTimeout(timer);
out.inbox = JSON.parse((await a.readResource({ uri: "switchboard://queues/inbox" })).contents[0].text);
await a.close();

// A wrong credential: the connect itself is refused with 401.
try {
  await connect(plan.a.url, "sbk_wrong");
  out.unauthorized = { thrown: false };
} catch (err) {
  out.unauthorized = thrown(err);
}

console.log(JSON.stringify({ result: out }));
stdin.close();
