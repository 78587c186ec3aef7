"""Validation and normalisation of what callers hand the core (SPEC-0034 REQ-5 and the limits).

Each check either returns a clean value or raises `Invalid` naming the argument; none touches the
database, so a bad argument never applies a transition.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any, TypeAlias, TypeGuard
from urllib.parse import urlsplit

from .errors import Invalid
from .states import TODO_STATES

# The limits, named once. The MCP input schemas are generated from these (mcp/schemas.py), the
# surfaces' help texts quote them, and every check below applies them.
SUMMARY_MAX_BYTES = 2048        # longer summaries are cut at a character boundary
NOTE_MAX_BYTES = 512            # a heartbeat's progress note; longer notes are refused
NOTES_MAX_PER_ATTEMPT = 20      # notes kept per attempt, the newest; older ones are dropped
ARTIFACT_MAX_BYTES = 512        # longer artifacts are refused
CLAIMANT_MAX_BYTES = 128        # longer claimant labels are cut
TITLE_MAX_CHARS = 512
PAYLOAD_MAX_BYTES = 256 * 1024  # of compact JSON
RESULT_MAX_BYTES = 64 * 1024    # of compact JSON
QUESTION_MAX_BYTES = 2048       # longer questions are refused
LEASE_MAX_SECONDS = 86400       # longer leases are cut to this
KEY_MAX_CHARS = 200
ASSIGNEE_MAX_CHARS = 200
KIND_MAX_CHARS = 64
ID_MAX_CHARS = 64               # todo ids and endpoint slugs
QUEUE_MAX_CHARS = 64
QUEUE_LABEL_MAX_CHARS = 5 + 32 + 1 + QUEUE_MAX_CHARS  # team:<slug>/<queue>
LEASE_TOKEN_MAX_CHARS = 256
MAX_ATTEMPTS_MIN, MAX_ATTEMPTS_MAX = 1, 100
LIST_LIMIT_DEFAULT = 50         # rows of a list, on every surface
LIST_LIMIT_MAX = 200            # an endpoint's list_todos; other values mean the default
OWNER_LIST_LIMIT_MAX = 500      # the owner's lists (API, CLI, Board); larger values are cut to this
OFFSET_MAX = 2**31 - 1
ATTEMPTS_LIMIT_DEFAULT = 20     # attempts in an endpoint's get_todo
ATTEMPTS_LIMIT_MAX = 50
BATCH_CLAIM_MAX = 100           # claim_next's max_todos: 1 to this; other values are refused
BATCH_CLOSE_MAX = 100           # items of one complete / fail call: 1 to this; more are refused
PUSH_BATCH_MAX = 1000           # todos of one bulk push: 1 to this; more are refused

# A JSON value as the core stores it (payload, result, input).
JsonValue: TypeAlias = "None | bool | int | float | str | list[JsonValue] | dict[str, JsonValue]"

# Matched with fullmatch: `$` would also accept a trailing newline.
_CAIRN = re.compile(r"mcp://cairn/[A-Za-z0-9_-]{1,64}")
_QUEUE = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.:-]{{0,{QUEUE_MAX_CHARS - 1}}}")
_TEAM_SLUG = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")
TEAM_PREFIX = "team:"
TEAM_ROLES = ("owner", "admin", "member")
_CONTROL = {"Cc", "Cf", "Cs", "Co", "Cn"}
# C0 controls and DEL, except tab, newline and carriage return: never part of a title, key or label.
_BAD_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_IDENT_BAD = re.compile(r"[\x00-\x20\x7f\ud800-\udfff]")


def _utf8(text: str) -> str:
    """Drop what PostgreSQL text cannot hold: NUL and lone surrogates."""
    return text.replace("\x00", "").encode("utf-8", "ignore").decode("utf-8")


def cut_utf8(text: str, max_bytes: int) -> tuple[str, bool]:
    """Cut `text` to at most `max_bytes` of UTF-8 on a character boundary."""
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text, False
    return raw[:max_bytes].decode("utf-8", "ignore"), True


def summary(value: object, argument: str = "summary") -> tuple[str | None, bool]:
    if value is None:
        return None, False
    if not isinstance(value, str):
        raise Invalid(f"{argument} must be a string", argument=argument)
    clean = _utf8(value)
    if clean == "":
        return None, False
    return cut_utf8(clean, SUMMARY_MAX_BYTES)


# Control characters stripped from a note: C0 (but tab and newline), DEL and C1. A carriage
# return goes too, so a note cannot overwrite a line when a terminal shows it.
_NOTE_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def note(value: object) -> str | None:
    """A heartbeat's progress note: the summary's rule (text the holder reports, stored as data and
    never read as instructions; NUL and lone surrogates dropped) with control characters stripped
    too, then at most NOTE_MAX_BYTES bytes of UTF-8; a longer note is refused. Empty means none."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise Invalid("note must be a string", argument="note")
    clean = _NOTE_CONTROL.sub("", _utf8(value))
    if len(clean.encode("utf-8")) > NOTE_MAX_BYTES:
        raise Invalid(f"note must be at most {NOTE_MAX_BYTES} bytes", argument="note")
    return clean if clean.strip() else None


def summary_from_result(result: object) -> tuple[str | None, bool]:
    if result is None:
        return None, False
    return cut_utf8(json.dumps(result, separators=(",", ":"), ensure_ascii=False), SUMMARY_MAX_BYTES)


def artifact(value: object) -> str | None:
    """`mcp://cairn/<id>` or an absolute https URL with a host, at most 512 bytes. Never fetched."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise Invalid("artifact must be a string", argument="artifact")
    if value == "":
        return None
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise Invalid("artifact must be valid UTF-8", argument="artifact") from None
    if size > ARTIFACT_MAX_BYTES:
        raise Invalid(f"artifact must be at most {ARTIFACT_MAX_BYTES} bytes", argument="artifact")
    if _CAIRN.fullmatch(value):
        return value
    if any(unicodedata.category(ch) in _CONTROL or ch.isspace() for ch in value):
        raise Invalid("artifact must be an https URL or an mcp://cairn/ reference", argument="artifact")
    try:
        parts = urlsplit(value)
    except ValueError:
        parts = None
    if parts is None or parts.scheme != "https" or not parts.hostname:
        raise Invalid("artifact must be an https URL or an mcp://cairn/ reference", argument="artifact")
    return value


def claimant(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise Invalid("claimant must be a string", argument="claimant")
    clean = "".join(ch for ch in _utf8(value) if unicodedata.category(ch) not in ("Cc", "Cf", "Cs"))
    clean, _ = cut_utf8(clean, CLAIMANT_MAX_BYTES)
    return clean or None


def lease_ttl(value: object, default: int, *, argument: str = "lease_ttl_seconds") -> int:
    """Per-call value, else the default; values above a day are clamped, non-positive mean default."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"{argument} must be an integer", argument=argument)
    if value <= 0:
        return default
    return min(value, LEASE_MAX_SECONDS)


def json_value(value: object, argument: str, max_bytes: int) -> str | None:
    """Serialise a JSON argument for jsonb; reject what PostgreSQL would refuse or what is too big."""
    if value is None:
        return None
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        raw = text.encode("utf-8")
    except RecursionError:
        raise Invalid(f"{argument} is nested too deeply", argument=argument) from None
    except (TypeError, ValueError, UnicodeEncodeError):
        raise Invalid(f"{argument} must be JSON made of valid UTF-8 text", argument=argument) from None
    if "\\u0000" in text:
        raise Invalid(f"{argument} must not contain NUL characters", argument=argument)
    if len(raw) > max_bytes:
        raise Invalid(f"{argument} must be at most {max_bytes} bytes of JSON", argument=argument)
    return text


def text(value: object, argument: str, *, max_chars: int, required: bool = False) -> str | None:
    if value is None or value == "":
        if required:
            raise Invalid(f"{argument} is required", argument=argument)
        return None
    if not isinstance(value, str):
        raise Invalid(f"{argument} must be a string", argument=argument)
    if "\x00" in value or _SURROGATE.search(value):
        raise Invalid(f"{argument} must be valid UTF-8 text", argument=argument)
    if len(value) > max_chars:
        raise Invalid(f"{argument} must be at most {max_chars} characters", argument=argument)
    if _BAD_CONTROL.search(value):
        raise Invalid(f"{argument} must not contain control characters", argument=argument)
    if required and not value.strip():
        raise Invalid(f"{argument} is required", argument=argument)
    return value


def identifier(value: object, argument: str, *, max_chars: int = ID_MAX_CHARS) -> str:
    """An id or slug: a non-empty string without whitespace, control characters or lone surrogates."""
    if not isinstance(value, str) or not value or len(value) > max_chars or _IDENT_BAD.search(value):
        raise Invalid(f"{argument} must be an identifier of 1-{max_chars} printable characters",
                      argument=argument)
    return value


def is_identifier(value: object, *, max_chars: int = ID_MAX_CHARS) -> TypeGuard[str]:
    return isinstance(value, str) and 0 < len(value) <= max_chars and not _IDENT_BAD.search(value)


def string_list(value: object, argument: str) -> list[str]:
    """A list (or tuple) of strings; a bare string is refused rather than split into characters."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise Invalid(f"{argument} must be a list of strings", argument=argument)
    return list(value)


def state(value: object, states: tuple[str, ...] = TODO_STATES, argument: str = "state") -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or value not in states:
        raise Invalid(f"{argument} must be one of {', '.join(states)}", argument=argument)
    return value


def seconds_or_none(value: object, argument: str, low: int, high: int) -> int | None:
    """A number of seconds from `low` to `high`, or None (nothing set, or cleared)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise Invalid(f"{argument} must be null or an integer from {low} to {high}", argument=argument)
    return value


def count(value: object, argument: str, *, default: int, low: int, high: int) -> int:
    """A non-negative integer option; None is the default, values are clamped to [low, high]."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"{argument} must be an integer", argument=argument)
    return max(low, min(value, high))


def queue(value: object, argument: str = "queue") -> str:
    """A queue name: an endpoint's own queue, or a team queue's label `team:<team-slug>/<queue>`."""
    if isinstance(value, str) and value.startswith(TEAM_PREFIX):
        team_label(value, argument)
        return value
    if not isinstance(value, str) or not _QUEUE.fullmatch(value):
        raise Invalid(f"{argument} must be 1-{QUEUE_MAX_CHARS} letters, digits or _.:- starting with a letter or digit,"
                      f" or a team queue {TEAM_PREFIX}<team-slug>/<queue>", argument=argument)
    return value


def is_team_label(value: str) -> bool:
    return value.startswith(TEAM_PREFIX)


def team_label(value: object, argument: str = "queue") -> tuple[str, str]:
    """Split a team queue's label `team:<team-slug>/<queue>` into (team slug, queue name)."""
    if isinstance(value, str) and value.startswith(TEAM_PREFIX):
        slug, sep, name = value[len(TEAM_PREFIX):].partition("/")
        if sep and _TEAM_SLUG.fullmatch(slug) and _QUEUE.fullmatch(name):
            return slug, name
    raise Invalid(f"{argument}: a team queue is {TEAM_PREFIX}<team-slug>/<queue>: the slug 1-32 lower-case letters,"
                  f" digits or - starting with a letter or digit, the queue 1-{QUEUE_MAX_CHARS} letters, digits"
                  " or _.:-", argument=argument)


def team_queue_label(team: str, queue: object, argument: str = "queue") -> str:
    """A queue of team `team` named by its bare name or by its label, as its label."""
    if isinstance(queue, str) and is_team_label(queue):
        slug, _ = team_label(queue, argument)
        if slug != team:
            raise Invalid(f"{argument} {queue} is not a queue of team {team}", argument=argument)
        return queue
    if queue is None or queue == "":
        raise Invalid(f"{argument} is required: a queue of team {team} (its name, or {TEAM_PREFIX}{team}/<queue>)",
                      argument=argument)
    if not isinstance(queue, str) or not _QUEUE.fullmatch(queue):
        raise Invalid(f"{argument} must be 1-{QUEUE_MAX_CHARS} letters, digits or _.:- starting with a letter or "
                      f"digit, or {TEAM_PREFIX}{team}/<queue>", argument=argument)
    return f"{TEAM_PREFIX}{team}/{queue}"


def team_slug(value: object, argument: str = "team") -> str:
    if not isinstance(value, str) or not _TEAM_SLUG.fullmatch(value):
        raise Invalid(f"{argument} must be 1-32 lower-case letters, digits or - starting with a letter or digit",
                      argument=argument)
    return value


def team_role(value: object, argument: str = "role") -> str:
    if value not in TEAM_ROLES:
        raise Invalid(f"{argument} must be one of {', '.join(TEAM_ROLES)}", argument=argument)
    return str(value)


def max_attempts(value: object, default: int) -> int:
    if value is None:
        return default
    if (isinstance(value, bool) or not isinstance(value, int)
            or not MAX_ATTEMPTS_MIN <= value <= MAX_ATTEMPTS_MAX):
        raise Invalid(f"max_attempts must be an integer from {MAX_ATTEMPTS_MIN} to {MAX_ATTEMPTS_MAX}",
                      argument="max_attempts")
    return value


def lease_token(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > LEASE_TOKEN_MAX_CHARS:
        raise Invalid(f"lease_token must be a string of at most {LEASE_TOKEN_MAX_CHARS} characters",
                      argument="lease_token")
    return value


def todo_id(value: object) -> str:
    """Syntax only (no NUL, control characters or lone surrogates, which PostgreSQL cannot take as
    text), so the answer says nothing about which todos exist."""
    if not is_identifier(value, max_chars=ID_MAX_CHARS):
        raise Invalid("id must be a todo id string", argument="id")
    return value


def boolean(value: object, argument: str, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise Invalid(f"{argument} must be a boolean", argument=argument)
    return value


def integer(value: object, argument: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"{argument} must be an integer", argument=argument)
    return value


def question(value: object) -> str | None:
    """The holder's question: text of at most QUESTION_MAX_BYTES bytes of UTF-8; longer is refused."""
    q = text(value, "question", max_chars=QUESTION_MAX_BYTES)
    if q is not None and len(q.encode("utf-8")) > QUESTION_MAX_BYTES:
        raise Invalid(f"question must be at most {QUESTION_MAX_BYTES} bytes", argument="question")
    return q


def list_limit(value: object) -> int:
    """An endpoint's list_todos limit: 1 to LIST_LIMIT_MAX, anything else (or none) the default."""
    n = integer(value, "limit")
    return n if n is not None and 0 < n <= LIST_LIMIT_MAX else LIST_LIMIT_DEFAULT


def attempts_limit(value: object, *, owner_view: bool) -> int | None:
    """How many attempts a read returns: the owner sees every kept attempt by default."""
    n = integer(value, "attempts_limit")
    if n is None:
        return None if owner_view else ATTEMPTS_LIMIT_DEFAULT
    if n <= 0:  # a non-positive limit means the default
        return ATTEMPTS_LIMIT_DEFAULT
    return min(n, OFFSET_MAX if owner_view else ATTEMPTS_LIMIT_MAX)


def max_todos(value: object) -> int:
    """claim_next's batch size: an integer from 1 to BATCH_CLAIM_MAX; anything else is refused."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= BATCH_CLAIM_MAX:
        raise Invalid(f"max_todos must be an integer from 1 to {BATCH_CLAIM_MAX}", argument="max_todos")
    return value


def batch_items(value: object, allowed: frozenset[str], name: str = "items") -> list[dict[str, Any]]:
    """The `items` of a batched complete / fail: a list of 1 to BATCH_CLOSE_MAX objects with only the
    `allowed` keys. Each item's values are checked by the verb (errors name the argument, `name`)."""
    if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= BATCH_CLOSE_MAX:
        raise Invalid(f"{name} must be a list of 1 to {BATCH_CLOSE_MAX} objects", argument=name)
    for n, item in enumerate(value):
        if not isinstance(item, dict):
            raise Invalid(f"{name}[{n}] must be an object", argument=name)
        unknown = sorted(str(k) for k in item if k not in allowed)
        if unknown:
            field = "".join(ch if ch.isprintable() else "?" for ch in unknown[0][:64])
            raise Invalid(f"{name}[{n}] has an unknown field {field}", argument=name)
    return list(value)
