"""Routing rules of a webhook intake: which verified deliveries become todos, and how they look.

A rule is a JSON object whose values are JMESPath expressions (https://jmespath.org) evaluated over
the delivery document `{"event", "delivery", "headers", "body"}`:

    {"name": "labelled issues",                        optional, for people
     "filter": "event == 'issues' && body.action == 'labeled' && body.label.name == 'agent'",
     "title": "join('', ['#', to_string(body.issue.number), ' ', body.issue.title])",   required
     "payload": "{url: body.issue.html_url, text: body.issue.body}",   default: the whole body
     "kind": "'issue'",                                 default: none
     "key": "join(':', ['issue', to_string(body.issue.id)])",   default: the delivery id
     "max_attempts": "`3`"}                             default: the server's

The first rule whose `filter` is truthy (JMESPath truthiness: not null, false, "", [] or {}; a rule
without a filter matches everything) shapes the todo. Every expression is compiled when the rules are
stored, so a bad one is refused then, naming the rule and the field. What an expression yields is
checked with the same limits as any pushed todo (core/inputs.py); a delivery no rule matches, or
whose rule fails, goes to the intake's quarantine with the reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import jmespath
from jmespath.exceptions import JMESPathError
from jmespath.parser import ParsedResult

from . import inputs
from .errors import Invalid

EXPRESSION_FIELDS = ("filter", "title", "payload", "kind", "key", "max_attempts")
RULE_FIELDS = ("name", *EXPRESSION_FIELDS)
MAX_RULES = 50
EXPRESSION_MAX_CHARS = 2048
NAME_MAX_CHARS = 64
DEFAULT_PAYLOAD = "body"


@dataclass(frozen=True)
class TodoShape:
    """What a matched rule made of a delivery: the fields of the todo to create."""

    rule: int
    title: str
    payload: Any
    kind: str | None
    key: str | None
    max_attempts: int | None


class RoutingFault(Exception):
    """The delivery cannot become a todo: no rule matched, or the matching rule failed. `reason` is
    kept with the quarantined delivery."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason[:1000]


def _where(index: int, field: str) -> str:
    return f"rules[{index}].{field}"


def _compile(expression: str) -> ParsedResult:
    return jmespath.compile(expression)


def validate(rules: Any) -> list[dict[str, Any]]:
    """The rules as stored: a list of at most MAX_RULES objects, each with a title expression, only
    known fields, and every expression compiling. Raises Invalid naming `rules[i].field`."""
    if isinstance(rules, str):
        try:
            rules = json.loads(rules)
        except ValueError as exc:
            raise Invalid(f"rules are not valid JSON: {exc}", argument="rules") from None
    if rules is None:
        return []
    if not isinstance(rules, list):
        raise Invalid("rules must be a JSON list of rule objects", argument="rules")
    if len(rules) > MAX_RULES:
        raise Invalid(f"at most {MAX_RULES} rules", argument="rules")
    clean: list[dict[str, Any]] = []
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict):
            raise Invalid(f"rules[{i}] must be an object", argument=f"rules[{i}]")
        for field in rule:
            if field not in RULE_FIELDS:
                shown = "".join(c if c.isprintable() else "?" for c in str(field)[:64])
                raise Invalid(f"rules[{i}]: unknown field {shown}; rule fields are {', '.join(RULE_FIELDS)}",
                              argument=_where(i, shown))
        out: dict[str, str] = {}
        if rule.get("name") is not None:
            out["name"] = inputs.text(rule["name"], _where(i, "name"), max_chars=NAME_MAX_CHARS) or ""
            if not out["name"]:
                del out["name"]
        if rule.get("title") in (None, ""):
            raise Invalid(f"{_where(i, 'title')} is required: an expression giving the todo's title",
                          argument=_where(i, "title"))
        for field in EXPRESSION_FIELDS:
            value = rule.get(field)
            if value is None:
                continue
            where = _where(i, field)
            if not isinstance(value, str) or not value.strip():
                raise Invalid(f"{where} must be a JMESPath expression (a non-empty string)", argument=where)
            if len(value) > EXPRESSION_MAX_CHARS:
                raise Invalid(f"{where} must be at most {EXPRESSION_MAX_CHARS} characters", argument=where)
            if "\x00" in value:  # PostgreSQL's jsonb cannot store it
                raise Invalid(f"{where} must not contain a NUL character", argument=where)
            try:
                _compile(value)
            except JMESPathError as exc:
                detail = " ".join(str(exc).split())[:300]
                raise Invalid(f"{where} is not a valid JMESPath expression: {detail}", argument=where) from None
            except RecursionError:  # nested deeper than the parser can follow
                raise Invalid(f"{where} nests too deeply to be read", argument=where) from None
            out[field] = value
        clean.append(out)
    return clean


def truthy(value: Any) -> bool:
    """JMESPath truthiness: false, null, and empty strings, lists and objects are false; 0 is true."""
    return not (value is None or value is False or value == "" or value == [] or value == {})


def _eval(rule: dict[str, Any], index: int, field: str, document: dict[str, Any]) -> Any:
    try:
        return _compile(rule[field]).search(document)
    except JMESPathError as exc:
        detail = " ".join(str(exc).split())[:300]
        raise RoutingFault(f"{_where(index, field)} failed: {detail}") from None
    except Exception as exc:  # a function meeting a value it cannot take: held, not lost
        raise RoutingFault(f"{_where(index, field)} failed: {type(exc).__name__}") from None


def _scalar_text(value: Any, index: int, field: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise RoutingFault(f"{_where(index, field)} gave {type(value).__name__}, not a string")
    return value if isinstance(value, str) else json.dumps(value)


def shape(rule: dict[str, Any], index: int, document: dict[str, Any], default_max_attempts: int) -> TodoShape:
    """The todo one rule makes of a delivery, every value checked as a pushed todo's would be."""
    title = _eval(rule, index, "title", document)
    if not isinstance(title, str):
        raise RoutingFault(f"{_where(index, 'title')} gave {type(title).__name__ if title is not None else 'null'}, "
                           "not a string")
    payload = _eval({"payload": rule.get("payload", DEFAULT_PAYLOAD)}, index, "payload", document)
    kind = _scalar_text(_eval(rule, index, "kind", document), index, "kind") if "kind" in rule else None
    if "key" in rule:
        key = _scalar_text(_eval(rule, index, "key", document), index, "key")
    else:
        key = document.get("delivery") or None
    attempts = None
    if "max_attempts" in rule:
        attempts = _eval(rule, index, "max_attempts", document)
        if attempts is not None and (isinstance(attempts, bool) or not isinstance(attempts, (int, float))
                                     or attempts != int(attempts)):
            raise RoutingFault(f"{_where(index, 'max_attempts')} gave {json.dumps(attempts)[:40]}, "
                               "not a whole number")
        attempts = int(attempts) if attempts is not None else None
    # The same checks a pushed todo meets, so a bad value is quarantined here and named.
    try:
        title = inputs.text(title, "title", max_chars=inputs.TITLE_MAX_CHARS, required=True) or ""
        inputs.json_value(payload, "payload", inputs.PAYLOAD_MAX_BYTES)
        kind = inputs.text(kind, "kind", max_chars=inputs.KIND_MAX_CHARS)
        key = inputs.text(key, "key", max_chars=inputs.KEY_MAX_CHARS)
        if attempts is not None:
            attempts = inputs.max_attempts(attempts, default_max_attempts)
    except Invalid as exc:
        raise RoutingFault(f"rules[{index}] made a bad todo: {exc.message}") from None
    return TodoShape(rule=index, title=title, payload=payload, kind=kind, key=key, max_attempts=attempts)


def route(rules: list[dict[str, Any]], document: dict[str, Any], *, default_max_attempts: int) -> TodoShape:
    """The first matching rule's todo; RoutingFault when none matches or the match fails."""
    for index, rule in enumerate(rules):
        if "filter" in rule and not truthy(_eval(rule, index, "filter", document)):
            continue
        return shape(rule, index, document, default_max_attempts)
    if not rules:
        raise RoutingFault("no rules: add a rule, then replay")
    raise RoutingFault(f"no rule matched (event {str(document.get('event'))[:64]!r})")
