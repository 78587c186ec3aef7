// The todo-detail view of the MCP App linked from get_todo (bundled into ../apps_todo_detail.html).
//
// It speaks to the host only through the official MCP Apps SDK (`App`): the host hands it get_todo's
// result, and it draws the todo and its attempt history with DOM text nodes only. Summaries,
// claimants and results are data written by agents, so nothing is parsed as HTML. An artifact is a
// link only when it is an absolute https URL, and opening it is asked of the host (`openLink`): the
// view itself has no network access (its CSP allows no fetch, image, font or frame source).
import { App } from "@modelcontextprotocol/ext-apps";

const root = document.getElementById("root");

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function httpsUrl(value) {
  if (typeof value !== "string") return null;
  try {
    const url = new URL(value);
    return url.protocol === "https:" ? url.href : null;
  } catch {
    return null;
  }
}

function artifact(value, app) {
  const href = httpsUrl(value);
  if (href === null) return el("span", "artifact", value);
  const a = el("a", "artifact", value);
  a.href = href;
  a.rel = "noopener noreferrer";
  a.target = "_blank";
  a.addEventListener("click", (event) => {
    event.preventDefault();
    app.openLink({ url: href });
  });
  return a;
}

function attemptItem(attempt, app) {
  const li = el("li", attempt.died ? "attempt died" : "attempt");
  li.dataset.seq = String(attempt.seq);
  const head = el("div", "head");
  head.append(el("span", "seq", `#${attempt.seq}`),
              el("span", "outcome", attempt.outcome ?? "open"),
              el("span", "disposition", attempt.disposition ?? ""));
  if (attempt.died) head.append(el("span", "died-marker", "died: no report"));
  li.append(head);
  const who = [attempt.claimer_kind, attempt.claimant].filter(Boolean).join(" · ");
  li.append(el("div", "who", `${who} · claimed ${attempt.claimed_at}`));
  if (attempt.died && attempt.last_heartbeat_at) {
    li.append(el("div", "heartbeat", `last heartbeat ${attempt.last_heartbeat_at}`));
  }
  if (attempt.summary !== null && attempt.summary !== undefined) {
    li.append(el("p", "summary", attempt.summary));
  }
  if (attempt.artifact) li.append(artifact(attempt.artifact, app));
  const notes = Array.isArray(attempt.notes) ? attempt.notes : [];
  if (notes.length > 0) {
    // Progress notes the holder left with its heartbeats, oldest first: set as text, never markup.
    const list = el("ol", "notes");
    for (const note of notes) list.append(el("li", "note", `${note.at} · ${note.text}`));
    li.append(el("div", "notes-label", `progress notes (${notes.length})`), list);
  }
  return li;
}

function render(todo, app) {
  root.replaceChildren();
  if (!todo || typeof todo !== "object" || !todo.id) {
    root.append(el("p", "empty", "No todo to show."));
    return;
  }
  root.append(el("h1", "title", todo.title));
  const facts = el("dl", "facts");
  for (const [label, value] of [["id", todo.id], ["queue", todo.queue], ["state", todo.state],
                                ["attempts", `${todo.attempt} of ${todo.max_attempts}`]]) {
    facts.append(el("dt", null, label), el("dd", `fact-${label}`, value));
  }
  root.append(facts);
  if (todo.result !== null && todo.result !== undefined) {
    root.append(el("h2", null, "Result"), el("pre", "result", JSON.stringify(todo.result, null, 2)));
  }
  root.append(el("h2", null, `Attempts (${todo.attempts_total ?? (todo.attempts ?? []).length})`));
  const list = el("ol", "attempts");
  for (const attempt of todo.attempts ?? []) list.append(attemptItem(attempt, app));
  root.append(list);
  root.dataset.rendered = todo.id;
}

const app = new App({ name: "switchboard-todo-detail", version: "1.0.0" });
app.ontoolresult = (result) => {
  if (result.isError) {
    root.replaceChildren(el("p", "error", "The todo could not be read."));
    return;
  }
  render(result.structuredContent, app);
};
app.connect();
