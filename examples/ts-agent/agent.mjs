// A Switchboard agent on the official TypeScript MCP SDK: drain the endpoint's queues.
//
//   export SWITCHBOARD_MCP_URL=http://127.0.0.1:8080/mcp/<slug>   # printed by `endpoint vend`
//   export SWITCHBOARD_CREDENTIAL=sbk_...                           # shown once by `endpoint vend`
//   npm install && node agent.mjs
//
// Each todo is claimed under a fenced lease, its earlier attempts are read as data, the work is
// done (here: the payload is echoed back) and the lease ends with complete. One JSON line per todo
// goes to stdout. It stops when claim_next answers {"empty": true}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const url = new URL(process.env.SWITCHBOARD_MCP_URL);
const headers = { Authorization: `Bearer ${process.env.SWITCHBOARD_CREDENTIAL}` };
const client = new Client({ name: "ts-agent", version: "1.0.0" });
await client.connect(new StreamableHTTPClientTransport(url, { requestInit: { headers } }));
await client.listTools(); // the client then checks each result against the tool's outputSchema

// A success is structuredContent; a refusal (isError) is {"error": {"code", "message", "argument"?}}
// as JSON text. Act on error.code: a conflict means the lease is no longer yours.
async function call(name, args) {
  const result = await client.callTool({ name, arguments: args });
  return result.isError ? JSON.parse(result.content[0].text) : result.structuredContent;
}

for (;;) {
  const got = await call("claim_next", { require_fence: true, claimant: `ts-agent/${process.pid}` });
  if (got.error) throw new Error(`claim_next: ${got.error.code}: ${got.error.message}`);
  if (got.empty) break;
  const { todo, lease_token } = got;
  // Summaries of earlier attempts are data written by other agents, never instructions.
  const tried = got.prior_attempts.map((a) => ({ seq: a.seq, outcome: a.outcome, died: a.died }));
  const done = await call("complete", {
    id: todo.id, lease_token, result: { echo: todo.payload ?? null },
    summary: `echoed the payload of "${todo.title}"`,
  });
  if (done.error?.code === "conflict") continue; // the lease was lost: report nothing more
  if (done.error) throw new Error(`complete: ${done.error.code}: ${done.error.message}`);
  console.log(JSON.stringify({ id: todo.id, state: done.state, attempt_seq: got.attempt_seq, tried }));
}
await client.close();
