"""The chat message a notification sink receives, per kind (docs/notifications.md).

`render(kind, event, facts, base_url=..., sink_name=...)` turns an outbox row's facts into the JSON
body the chat expects:

- `slack`: a Slack-compatible incoming webhook body `{"text", "blocks"}`. Every piece of text that
  somebody else wrote (a todo title, an agent's summary, a queue or sink name) is escaped for mrkdwn
  (`&`, `<`, `>` as `&amp;`, `&lt;`, `&gt;`), so it can neither link nor mention; the agent's summary
  goes in a `plain_text` block besides. The Board link is a button, not text.
- `discord`: `{"content", "embeds", "allowed_mentions": {"parse": []}}`: no mention pings, and
  Markdown characters (and `@`, `<`, `:`) in written text are backslash-escaped.
- `teams`: a Microsoft Teams workflow message carrying an Adaptive Card; written text is
  backslash-escaped for the card's Markdown subset; the Board link is an `Action.OpenUrl`.
- `generic`: our own JSON: `{"type", "text", "sink", "board_url", "data"}`, text as plain text.

A queue is shown as `endpoint/queue`, or for a team queue (facts with `team` and no endpoint) as its
label `team:<team-slug>/<queue>`, the address agents use; a stuck team queue links to the Board's
todo list filtered by the team.

Written text is also stripped of control characters (it becomes one line) and cut: a title to 200
characters, a summary to 300 (the trigger already cuts it), a name to 64. No payload, no secret, no
header is ever included: the facts never hold them.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote, urlencode

KINDS = ("slack", "discord", "teams", "generic")
EVENTS = ("dead_letter", "queue_stuck", "digest")
DIGEST_QUEUES_SHOWN = 20
BUTTON = "Open on the Board"

_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
_DISCORD_SPECIAL = re.compile(r"([\\*_~`|>#\-\[\]()<@:!.+=])")
_TEAMS_SPECIAL = re.compile(r"([\\*_~`|>#\-\[\]()<!+])")


def plain(value: Any, limit: int) -> str:
    """Written text made one line of printable characters, at most `limit` characters."""
    text = _CONTROLS.sub(" ", "" if value is None else str(value)).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def discord_escape(text: str) -> str:
    return _DISCORD_SPECIAL.sub(r"\\\1", text)


def teams_escape(text: str) -> str:
    return _TEAMS_SPECIAL.sub(r"\\\1", text)


def _minutes(value: Any) -> str:
    try:
        total = int(value)
    except (TypeError, ValueError):
        return "unavailable"
    if total < 60:
        return f"{total} min"
    hours, minutes = divmod(total, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    return f"{hours // 24} d {hours % 24} h"


def where(facts: dict[str, Any]) -> str:
    """The queue a message is about: `endpoint/queue` for an endpoint's queue, the label
    `team:<team-slug>/<queue>` for a team queue (its facts name the team and no endpoint; the label
    is the address agents use, and it already names the team)."""
    if facts.get("team") is not None:
        return plain(facts.get("queue"), 128)
    return f"{plain(facts.get('endpoint'), 64)}/{plain(facts.get('queue'), 64)}"


# ----------------------------------------------------------------------------- the content

def content(event: str, facts: dict[str, Any], *, base_url: str, sink_name: str) -> dict[str, Any]:
    """What any kind says: a headline, fact lines (label, value), an optional quoted summary, the
    Board link. Values are plain text, not yet escaped."""
    base = base_url.rstrip("/")
    if event == "dead_letter":
        title = plain(facts.get("title"), 200)
        outcome = plain(facts.get("last_outcome") or "none", 32)
        lines = [("Queue", where(facts)), ("Attempts", str(int(facts.get("attempts_total") or 0))),
                 ("Last attempt", outcome), ("Reason", plain(facts.get("reason"), 32))]
        summary = plain(facts.get("last_summary"), 300) or None
        return {"headline": f"Dead letter: {title}", "lines": lines, "summary": summary,
                "link": f"{base}/todos/{quote(str(facts.get('todo_id', '')), safe='')}",
                "color": 0xC0392B}
    if event == "queue_stuck":
        queue = where(facts)
        lines = [("Queue", queue), ("Pending", str(int(facts.get("pending") or 0))),
                 ("Oldest waiting", _minutes(facts.get("waiting_minutes"))),
                 ("Threshold", _minutes(facts.get("stuck_minutes")))]
        scope = {"team": str(facts["team"])} if facts.get("team") is not None else \
            {"endpoint": str(facts.get("endpoint", ""))}
        query = urlencode({**scope, "queue": str(facts.get("queue", "")), "state": "pending"})
        return {"headline": f"Queue stuck: {queue} has had a todo waiting with no claim for "
                            f"{_minutes(facts.get('waiting_minutes'))}",
                "lines": lines, "summary": None, "link": f"{base}/todos?{query}", "color": 0xE67E22}
    if event == "digest":
        queues = list(facts.get("queues") or [])
        lines = []
        for q in queues[:DIGEST_QUEUES_SHOWN]:
            oldest = "none" if q.get("oldest_pending_minutes") is None else _minutes(q["oldest_pending_minutes"])
            lines.append((where(q),
                          f"pushed {q.get('pushed', 0)}, done {q.get('done', 0)}, failed {q.get('failed', 0)}, "
                          f"dead-lettered {q.get('dead_lettered', 0)}, oldest pending {oldest}"))
        if len(queues) > DIGEST_QUEUES_SHOWN:
            lines.append(("More", f"{len(queues) - DIGEST_QUEUES_SHOWN} more queues on the Board"))
        if not queues:
            lines.append(("Queues", "no activity and nothing pending"))
        return {"headline": f"Daily digest ({plain(sink_name, 64)}): the last 24 hours to "
                            f"{plain(facts.get('until'), 32)}",
                "lines": lines, "summary": None, "link": f"{base}/queues", "color": 0x2980B9}
    if event == "test":
        return {"headline": f"Test message from Switchboard: the sink {plain(sink_name, 64)} works",
                "lines": [], "summary": None, "link": f"{base}/notifications", "color": 0x27AE60}
    raise ValueError(f"unknown event {event!r}")


# ------------------------------------------------------------------------------- the kinds

def _slack(c: dict[str, Any]) -> dict[str, Any]:
    facts = "\n".join(f"*{slack_escape(label)}:* {slack_escape(value)}" for label, value in c["lines"])
    blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": c["headline"][:150],
                                                      "emoji": False}}]
    if facts:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": facts[:3000]}})
    if c["summary"]:
        blocks.append({"type": "section", "text": {"type": "plain_text", "text": f"Last summary: {c['summary']}",
                                                   "emoji": False}})
    blocks.append({"type": "actions", "elements": [
        {"type": "button", "text": {"type": "plain_text", "text": BUTTON}, "url": c["link"]}]})
    text = slack_escape(c["headline"])
    if c["summary"]:
        text += "\nLast summary: " + slack_escape(c["summary"])
    return {"text": text, "blocks": blocks, "unfurl_links": False, "unfurl_media": False}


def _discord(c: dict[str, Any]) -> dict[str, Any]:
    embed: dict[str, Any] = {
        "title": discord_escape(c["headline"])[:256],
        "url": c["link"],
        "color": c["color"],
        "fields": [{"name": discord_escape(label)[:256], "value": discord_escape(value)[:1024] or "-",
                    "inline": len(value) < 40} for label, value in c["lines"][:25]],
    }
    if c["summary"]:
        embed["description"] = "Last summary: " + discord_escape(c["summary"])
    return {"content": discord_escape(c["headline"])[:2000], "embeds": [embed],
            "allowed_mentions": {"parse": []}}


def _teams(c: dict[str, Any]) -> dict[str, Any]:
    body: list[dict[str, Any]] = [{"type": "TextBlock", "text": teams_escape(c["headline"]), "weight": "Bolder",
                         "size": "Medium", "wrap": True}]
    if c["lines"]:
        body.append({"type": "FactSet", "facts": [{"title": teams_escape(label), "value": teams_escape(value)}
                                                  for label, value in c["lines"]]})
    if c["summary"]:
        body.append({"type": "TextBlock", "text": "Last summary: " + teams_escape(c["summary"]), "wrap": True})
    card = {"$schema": "http://adaptivecards.io/schemas/adaptive-card.json", "type": "AdaptiveCard",
            "version": "1.4", "body": body,
            "actions": [{"type": "Action.OpenUrl", "title": BUTTON, "url": c["link"]}]}
    return {"type": "message", "attachments": [
        {"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None, "content": card}]}


def _generic(event: str, c: dict[str, Any], facts: dict[str, Any], sink_name: str) -> dict[str, Any]:
    text = "\n".join([c["headline"], *(f"{label}: {value}" for label, value in c["lines"])]
                     + ([f"Last summary: {c['summary']}"] if c["summary"] else []))
    return {"type": event, "text": text, "sink": plain(sink_name, 64), "board_url": c["link"], "data": facts}


def render(kind: str, event: str, facts: dict[str, Any], *, base_url: str, sink_name: str) -> dict[str, Any]:
    """The JSON body for one sink kind."""
    c = content(event, facts, base_url=base_url, sink_name=sink_name)
    if kind == "slack":
        return _slack(c)
    if kind == "discord":
        return _discord(c)
    if kind == "teams":
        return _teams(c)
    if kind == "generic":
        return _generic(event, c, facts, sink_name)
    raise ValueError(f"unknown sink kind {kind!r}")
