"""The human API's bodies as pydantic models: the handlers validate requests with them, and the
OpenAPI document (`openapi.py`) is generated from them, so the two cannot drift.

Request models forbid unknown fields and validate strictly (a string is not a number, a number is not
a boolean), as the core does; the core's own checks (`core/inputs.py`) still run behind them, so a
limit the schema cannot say (control characters, UTF-8 byte counts) is refused with the same
`invalid` error naming the field. Response models describe what the core's shapes (`core/shapes.py`
and friends) return; those shapes are the CLI's `--json` output too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, WithJsonSchema, create_model

from ...core import actions, admission, api_tokens, hooks, inputs, intake_rules, intakes, sink_messages, sinks, teams
from ...core.models import VERBS
from ...core.states import TODO_STATES

Json = Any  # any JSON value

if TYPE_CHECKING:  # built from the core's tuples at import; plain strings to the type checker
    TodoState = str
    HookEvent = str
    SinkKind = str
    SinkEvent = str
    IntakeSource = str
    Verb = str
else:
    TodoState = Literal[tuple(TODO_STATES)]
    HookEvent = Literal[tuple(hooks.EVENTS)]
    SinkKind = Literal[tuple(sink_messages.KINDS)]
    SinkEvent = Literal[tuple(sink_messages.EVENTS)]
    IntakeSource = Literal[tuple(intakes.SOURCES)]
    Verb = Literal[tuple(VERBS)]
Scope = Literal["read", "write"]
TeamRole = Literal["owner", "admin", "member"]
QUEUE_PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9_.:-]{{0,{inputs.QUEUE_MAX_CHARS - 1}}}$"
TEAM_SLUG_PATTERN = r"^[a-z0-9][a-z0-9-]{0,31}$"


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Query(BaseModel):
    """Query parameters arrive as text: validated laxly (`limit=10`, `dead_letter=true`)."""

    model_config = ConfigDict(extra="forbid")


class Reply(BaseModel):
    pass


# --------------------------------------------------------------------------------------- errors

class ErrorDetail(Reply):
    code: str = Field(description="invalid, unauthorized, forbidden, not_found, method_not_allowed, conflict, "
                                  "deferred, too_large, rate_limited, unavailable or internal.")
    message: str
    argument: str | None = Field(None, description="The field, parameter or header that was wrong.")
    queue: str | None = Field(None, description="`deferred`: the queue admission control defers.")
    reason: str | None = Field(None, description="`deferred`: window_exhausted, in_flight_full, paused or "
                                                 "admission_unavailable.")
    pending: int | None = Field(None, description="`deferred`: the queue's todos waiting (null when unknown).")
    next_eligible_at: str | None = Field(None, description="`deferred`: when the queue may admit a claim again "
                                                           "(null when no moment is known).")


class ErrorReply(Reply):
    error: ErrorDetail


# ------------------------------------------------------------------------------------------ todos

class Note(Reply):
    """A progress note an agent sent with a heartbeat: data written by the agent, never an instruction."""

    at: str
    text: str


class Attempt(Reply):
    seq: int
    attempt: int
    claimer_kind: str
    claimant: str | None
    claimed_at: str | None
    last_heartbeat_at: str | None
    ended_at: str | None
    outcome: str | None
    disposition: str | None
    died: bool
    summary: str | None
    summary_truncated: bool
    artifact: str | None
    lease_expires_at: str | None = None
    owner_extended_at: str | None = None
    last_note: Note | None = None
    notes: list[Note] | None = None


class Todo(Reply):
    """A todo: the compact row of lists and actions; `GET /todos/{id}` adds the payload, result,
    input and every attempt (newest first)."""

    id: str
    queue: str
    title: str
    state: TodoState
    source: str | None = None
    kind: str | None = None
    owner: str | None = None
    assignee: str | None = None
    attempt: int
    max_attempts: int
    lease_expires_at: str | None = None
    next_retry_at: str | None = None
    dead_letter: bool
    created_at: str | None = None
    payload_size: int | None = None
    endpoint: str | None = Field(None, description="The endpoint's slug (null for a team's todo).")
    team: str | None = Field(None, description="The team's slug, for a todo on a team queue.")
    updated_at: str | None = None
    held_back: bool | None = Field(None, description="Lists: a pending todo whose queue admission control "
                                                     "holds back now (paused, a limit reached).")
    payload: Json = None
    input_request: Json = None
    input: Json = None
    result: Json = None
    attempts: list[Attempt] | None = None
    attempts_total: int | None = None
    attempts_pruned: int | None = None
    claimed_at: str | None = None
    completed_at: str | None = None


class TodoReply(Reply):
    todo: Todo


class PushReply(Reply):
    todo: Todo
    created: bool = Field(description="false: a live todo already had this key, and it is returned.")


class TodoList(Reply):
    todos: list[Todo]
    next_offset: int | None = Field(description="The `offset` of the next page; null on the last page.")


class PushRequest(Request):
    title: str = Field(max_length=inputs.TITLE_MAX_CHARS)
    queue: str | None = Field(None, description="Required when the endpoint has several queues.")
    payload: Json = Field(None, description=f"Any JSON value, at most {inputs.PAYLOAD_MAX_BYTES} bytes.")
    kind: str | None = Field(None, max_length=inputs.KIND_MAX_CHARS)
    key: str | None = Field(None, max_length=inputs.KEY_MAX_CHARS,
                               description="Idempotency key: a live todo with this key is returned instead. "
                                           "The `Idempotency-Key` header says the same.")
    max_attempts: int | None = Field(None, ge=inputs.MAX_ATTEMPTS_MIN, le=inputs.MAX_ATTEMPTS_MAX)
    assignee: str | None = Field(None, max_length=inputs.ASSIGNEE_MAX_CHARS,
                                    description="Only this owner may claim it.")


class PushManyRequest(Request):
    todos: list[PushRequest] = Field(min_length=1, max_length=inputs.PUSH_BATCH_MAX,
                                     description=f"1 to {inputs.PUSH_BATCH_MAX} todos, each with the fields of "
                                                 "a single push; all are checked before any is pushed.")


class PushResult(Reply):
    todo: Todo
    created: bool = Field(description="false: a live todo already had this key (or an earlier item of "
                                      "this request did), and it is returned.")


class PushManyReply(Reply):
    results: list[PushResult] = Field(description="One per pushed item, in the request's order.")
    created: int = Field(description="How many todos this request created.")
    existing: int = Field(description="How many items were answered with an existing todo.")


class TodoListQuery(Query):
    state: TodoState | None = None
    queue: str | None = None
    dead_letter: bool = Field(False, description="Only dead letters.")
    limit: int | None = Field(None, description=f"Rows per page (default {inputs.LIST_LIMIT_DEFAULT}, "
                                                   f"at most {inputs.OWNER_LIST_LIMIT_MAX}).")
    offset: int | None = Field(None, ge=0, le=inputs.OFFSET_MAX, description="Rows to skip (paging).")


class AllTodosQuery(TodoListQuery):
    endpoint: str | None = Field(None, description="Only this endpoint's todos (its slug).")
    team: str | None = Field(None, description="Only this team's todos (its slug); a team you are not a member "
                                               "of is not_found.")


class TodoShowQuery(Query):
    attempts_limit: int | None = Field(None, description="At most this many attempts (default: every one).")


_KIND = {"text": str | None, "json": Json, "integer": int | None, "boolean": bool | None}


def _action_model(action: actions.OwnerAction) -> type[Request]:
    fields: dict[str, Any] = {}
    for f in action.fields:
        default = ... if f.required else None
        fields[f.name] = (_KIND[f.kind], Field(default, description=f.help))
    name = "".join(p.capitalize() for p in action.name.split("_")) + "Request"
    return create_model(name, __base__=Request, __doc__=action.help, **fields)


ACTION_MODELS: dict[str, type[Request]] = {name: _action_model(a) for name, a in actions.ACTIONS.items()}


# -------------------------------------------------------------------------------------- endpoints

class Endpoint(Reply):
    endpoint_id: str
    slug: str
    agent: str
    queues: list[str]
    verbs: list[str]
    state: str
    credential_prefix: str
    default_lease_ttl_seconds: int | None
    created_at: str
    revoked_at: str | None
    expires_at: str | None
    last_used_at: str | None
    mcp_url: str


class EndpointList(Reply):
    endpoints: list[Endpoint]


class EndpointReply(Reply):
    endpoint: Endpoint


class RevokedEndpoint(Endpoint):
    dead_lettered: int = Field(description="Live todos that became dead letters.")


class VendRequest(Request):
    agent: str = Field(min_length=1, max_length=64, description="The agent's name (created if new).")
    queues: list[str] | None = Field(None, description="Granted queues (default: inbox).")
    verbs: list[Verb] | None = Field(None, description="Granted verbs (default: the drain family).")
    lease_ttl: int | None = Field(None, ge=60, le=86400, description="Default lease in seconds.")
    expires_in_seconds: int | None = Field(
        None, ge=api_tokens.EXPIRES_MIN_SECONDS, le=api_tokens.EXPIRES_MAX_SECONDS,
        description="The endpoint is revoked (with its live todos) this long from now; default never.")


class EndpointChange(Request):
    expires_in_seconds: int | None = Field(
        None, ge=api_tokens.EXPIRES_MIN_SECONDS, le=api_tokens.EXPIRES_MAX_SECONDS,
        description="Expire this long from now; null: never. Left out: unchanged.")
    default_lease_ttl_seconds: int | None = Field(
        None, ge=60, le=86400, description="The default lease of its claims; null: the server's. Left out: unchanged.")


class Vended(Reply):
    """The CLI's `endpoint vend --json`: the credential is shown here once and never again."""

    endpoint_id: str
    slug: str
    agent: str
    queues: list[str]
    verbs: list[str]
    mcp_url: str
    credential: str
    expires_at: str | None
    awaiting_grant: list[str] | None = Field(
        None, description="Team queues named in `queues` that wait for a team owner's or admin's grant (a "
                          "plain member's vend); present when team queues were named.")


# ------------------------------------------------------------------------------------------ hooks

class Hook(Reply):
    hook_id: str
    endpoint: str | None = Field(description="The endpoint whose todo events it sends; null for a team's hook.")
    team: str | None = Field(None, description="A team's hook: the team whose todo events it sends (absent "
                                               "for an endpoint's hook).")
    url: str
    events: list[str]
    enabled: bool
    created_at: str | None
    last_attempt_at: str | None
    last_status: str | None
    last_error: str | None
    consecutive_failures: int
    disabled_reason: str | None


class HookRequest(Request):
    url: str = Field(max_length=hooks.URL_MAX_BYTES, description="The https target.")
    events: list[HookEvent] | None = Field(None, description="Default: every event.")


class HookCreated(Reply):
    hook: Hook
    signing_secret: str = Field(description="Shown once: verify the webhook-signature header with it.")


class HookList(Reply):
    hooks: list[Hook]


class HookRemoved(Reply):
    removed: Hook


class HookReply(Reply):
    hook: Hook


class DeliveryAttempt(Reply):
    attempt: int
    started_at: str | None
    duration_ms: int | None
    status_code: int | None
    result: str | None
    error: str | None


class Delivery(Reply):
    delivery_id: int
    message_id: str
    hook_id: str
    endpoint: str | None = Field(description="The hook's endpoint; null for a team's hook.")
    team: str | None = Field(None, description="A team's hook: its team (absent for an endpoint's hook).")
    url: str
    event: str
    todo_id: str | None
    state: str
    attempts: int
    created_at: str | None
    next_attempt_at: str | None
    finished_at: str | None
    last_attempt_at: str | None
    last_status_code: int | None
    last_result: str | None
    last_error: str | None
    last_duration_ms: int | None
    attempt_log: list[DeliveryAttempt] | None = None


class DeliveryList(Reply):
    deliveries: list[Delivery]


class DeliveriesQuery(Query):
    limit: int = Field(50, description="At most this many (1-500).")
    hook_id: str | None = Field(None, description="Only this hook's notifications.")


# ------------------------------------------------------------------------------------------ sinks

class SinkRequest(Request):
    kind: SinkKind = Field(description="The chat the messages are shaped for.")
    url: str = Field(max_length=hooks.URL_MAX_BYTES,
                     description="The chat's incoming-webhook URL (https; the notify hooks' target rules).")
    name: str | None = Field(None, max_length=64, description="A label (default: the kind).")
    events: list[SinkEvent] | None = Field(None, description="Default: every event.")
    stuck_minutes: int | None = Field(None, ge=1, le=sinks.STUCK_MINUTES_MAX,
                                      description="A queue is stuck when a todo waits this long with no claim "
                                                  "(default 30).")
    digest_hour: int | None = Field(None, ge=0, le=23, description="The digest's local hour (default 9).")
    timezone: str | None = Field(None, max_length=64, description="The IANA time zone of `digest_hour`, such as "
                                                                  "Europe/Berlin (default UTC).")


class SinkOwner(Reply):
    """Whose sink: a human's (`human`, their id) or a team's (`team`, its slug); one of the two."""

    human: str | None = Field(None, description="A human's sink: the human's id.")
    team: str | None = Field(None, description="A team's sink: the team's slug.")


class Sink(Reply):
    sink_id: str
    name: str
    kind: str
    url: str = Field(description="Its query string redacted, except in the answer that added it.")
    events: list[str]
    stuck_minutes: int
    digest_hour: int
    timezone: str
    owner: SinkOwner
    enabled: bool
    created_at: str | None
    last_attempt_at: str | None
    last_status: str | None
    last_error: str | None
    consecutive_failures: int
    disabled_reason: str | None
    disabled_at: str | None


class SinkReply(Reply):
    sink: Sink


class SinkList(Reply):
    sinks: list[Sink]


class SinkRemoved(Reply):
    removed: Sink


class SinkTest(Reply):
    sink_id: str
    delivered: bool
    result: str = Field(description="2xx, 3xx, 4xx, 5xx, timeout, network, tls or rejected_ssrf.")
    status_code: int | None
    error: str | None


class SinkTestReply(Reply):
    test: SinkTest


class SinkDelivery(Reply):
    delivery_id: int
    sink_id: str
    event: str
    state: str = Field(description="pending, delivered or failed.")
    attempts: int
    created_at: str | None
    finished_at: str | None
    last_status_code: int | None
    last_result: str | None
    last_error: str | None


class SinkDeliveryList(Reply):
    deliveries: list[SinkDelivery]


class SinkDeliveriesQuery(Query):
    limit: int = Field(50, description="At most this many (1-500).")
    sink_id: str | None = Field(None, description="Only this sink's messages.")


# ---------------------------------------------------------------------------------------- intakes

EXPRESSION = intake_rules.EXPRESSION_MAX_CHARS


class IntakeRule(Request):
    """A routing rule: JMESPath expressions over the delivery document `{"event", "delivery", "headers",
    "body"}` (docs/intake.md). Each expression is compiled when the rules are stored; a bad one is
    `invalid` naming `rules[i].field`."""

    name: str | None = Field(None, max_length=intake_rules.NAME_MAX_CHARS, description="Plain text, for you.")
    filter: str | None = Field(None, max_length=EXPRESSION,
                               description="The rule applies when this is truthy; no filter matches everything.")
    title: str = Field(min_length=1, max_length=EXPRESSION, description="The todo's title.")
    payload: str | None = Field(None, max_length=EXPRESSION, description="The todo's payload (default `body`).")
    kind: str | None = Field(None, max_length=EXPRESSION, description="The todo's kind.")
    key: str | None = Field(None, max_length=EXPRESSION,
                            description="The idempotency key (default: the delivery id).")
    max_attempts: str | None = Field(None, max_length=EXPRESSION,
                                     description="An expression giving a whole number from 1 to 100 (a JSON "
                                                 "literal goes in backticks).")


RULES_HELP = f"At most {intake_rules.MAX_RULES} rules; the first whose filter is truthy shapes the todo."


class IntakeRequest(Request):
    name: str = Field(min_length=1, max_length=intakes.NAME_MAX_CHARS,
                      description="Unique among your intakes; one line without / ? # % or \\ (it names the "
                                  "intake in URLs).")
    endpoint: str = Field(description="The slug of your endpoint whose queue gets the todos.")
    source: IntakeSource = Field(description="How deliveries are verified (docs/intake.md, source kinds).")
    queue: str | None = Field(None, description="The endpoint's queue (required when it has several).")
    secret: str | None = Field(None, max_length=intakes.SECRET_MAX_BYTES,
                               description=f"The sender's secret, {intakes.SECRET_MIN_BYTES} to "
                                           f"{intakes.SECRET_MAX_BYTES} printable ASCII characters (`standard`: "
                                           "whsec_ and base64); default: a fresh one.")
    rules: list[IntakeRule] | None = Field(None, max_length=intake_rules.MAX_RULES,
                                           description=RULES_HELP + " null or left out: none.")


class IntakeRulesRequest(Request):
    rules: list[IntakeRule] | None = Field(max_length=intake_rules.MAX_RULES,
                                           description="The new rules, replacing every one (null or [] for none). "
                                                       + RULES_HELP)


class EmptyRequest(Request):
    """No fields: send nothing or `{}`."""


class IntakeRuleStored(Reply):
    name: str | None = None
    filter: str | None = None
    title: str
    payload: str | None = None
    kind: str | None = None
    key: str | None = None
    max_attempts: str | None = None


class Intake(Reply):
    """An intake as its owner sees it: never the secret, never the URL's token (only its prefix)."""

    intake_id: str
    name: str
    endpoint: str = Field(description="The slug of the endpoint whose queue gets the todos.")
    endpoint_state: str
    queue: str
    source: str
    token_prefix: str
    enabled: bool = Field(description="false: paused, its URL answers like an unknown one.")
    rules: list[IntakeRuleStored]
    created_at: str | None
    accepted: int = Field(description="Deliveries that became todos.")
    duplicates: int = Field(description="Redeliveries answered with the todo an earlier one made.")
    quarantined: int = Field(description="Deliveries quarantined so far.")
    verify_failures: int = Field(description="Deliveries refused: bad signature, stale timestamp.")
    last_delivery_at: str | None
    last_failure_at: str | None
    held: int = Field(description="Deliveries in the quarantine now.")


class IntakeCreated(Reply):
    intake: Intake
    url: str = Field(description="Where the sender posts its webhooks; shown once (its token is not kept).")
    token: str = Field(description="The URL's token (`sbi_…`), shown once.")
    secret: str = Field(description="The secret the sender signs with, shown once.")


class IntakeReply(Reply):
    intake: Intake


class IntakeList(Reply):
    intakes: list[Intake]


class IntakeRemoved(Reply):
    removed: Intake


class QuarantineEntry(Reply):
    item_id: int
    received_at: str | None
    event: str | None
    delivery: str | None = Field(description="The sender's delivery id.")
    reason: str = Field(description="Why no todo was made: no rule matched, or which rule failed and how.")
    replays: int = Field(description="Replays that quarantined it again.")
    size: int = Field(description="The delivery document's size in bytes.")


class QuarantineList(Reply):
    quarantine: list[QuarantineEntry]


class QuarantineQuery(Query):
    limit: int | None = Field(None, description=f"At most this many (1-{intakes.QUARANTINE_MAX}, default "
                                                   f"{intakes.QUARANTINE_MAX}).")


class QuarantinedDelivery(Reply):
    item_id: int
    received_at: str | None
    event: str | None
    delivery: str | None
    reason: str
    replays: int
    document: Json = Field(description="The delivery document the rules saw: event, delivery, headers, body.")


class QuarantinedReply(Reply):
    item: QuarantinedDelivery


class Dropped(Reply):
    item_id: int
    dropped: bool


class DroppedReply(Reply):
    dropped: Dropped


class Replayed(Reply):
    todo: Todo
    created: bool = Field(description="false: a live todo already had the rule's key, and it is returned.")


# --------------------------------------------------------------------------------------- settings

class SettingsMap(RootModel[dict[str, int]]):
    """Setting name to value (the CLI's `settings get --json`)."""


class SettingRequest(Request):
    value: int


class SweepReport(Reply):
    """The CLI's `sweep --once --json`: what one pass did."""

    reaped: int
    requeued: int
    expired_endpoints: int
    retention_deleted: int


# ----------------------------------------------------------------------------------------- tokens

class Token(Reply):
    id: str
    prefix: str
    scope: Scope
    created_at: str
    expires_at: str | None
    revoked_at: str | None


class TokenRequest(Request):
    scope: Scope = Field("write", description="read: GET routes only. write: everything you may do.")
    expires_in_seconds: int | None = Field(
        None, ge=api_tokens.EXPIRES_MIN_SECONDS, le=api_tokens.EXPIRES_MAX_SECONDS,
        description="The token stops working this long from now; default never.")


class TokenCreated(Reply):
    """The CLI's `token create --json`, with the scope and expiry: the token is shown once."""

    token: str
    id: str
    prefix: str
    user: str
    scope: Scope
    expires_at: str | None


class TokenList(Reply):
    tokens: list[Token]


class TokenRevoked(Reply):
    token: Token
    revoked: bool = Field(description="false: it was revoked already.")


class Me(Reply):
    user: str
    admin: bool
    token: Token


# ------------------------------------------------------------------------------------------ teams

class TeamRequest(Request):
    slug: str = Field(pattern=TEAM_SLUG_PATTERN, description="1-32 lower-case letters, digits or -, starting "
                                                                "with a letter or digit; unique on the server.")
    name: str | None = Field(None, max_length=teams.NAME_MAX_CHARS, description="A display name (default: the slug).")


class TeamSummary(Reply):
    slug: str
    name: str
    created_at: str
    role: TeamRole | None = Field(None, description="Your role in the team.")
    members: int | None = Field(None, description="How many members it has (in a list).")


class TeamCreated(Reply):
    team: TeamSummary


class TeamList(Reply):
    teams: list[TeamSummary]


class TeamMember(Reply):
    name: str
    role: TeamRole
    added_at: str


class TeamQueue(Reply):
    """A team queue's live todos by state (a granted queue with none yet counts zeros)."""

    queue: str = Field(description="The label team:<team-slug>/<queue>.")
    pending: int
    in_flight: int
    parked: int = Field(description="Failed with a retry scheduled.")
    dead: int = Field(description="Dead letters.")


class TeamGrant(Reply):
    queue: str
    endpoint: str = Field(description="The endpoint's slug.")
    agent: str
    human: str = Field(description="The member whose endpoint it is.")
    granted_at: str
    reaches: bool = Field(description="Whether the endpoint reaches the queue now (its human a member, it active).")


class TeamDetail(Reply):
    slug: str
    name: str
    created_at: str
    role: TeamRole = Field(description="Your role in the team.")
    members: list[TeamMember]
    queues: list[TeamQueue]
    grants: list[TeamGrant]


class TeamReply(Reply):
    team: TeamDetail


class MemberRequest(Request):
    role: TeamRole | None = Field(None, description="Default member; only an owner adds an owner.")
    human: str = Field(min_length=1, max_length=inputs.ID_MAX_CHARS, description="The human's user name.")


class RoleRequest(Request):
    role: TeamRole = Field(description="Making or unmaking an owner takes an owner; the last owner stays.")


class Membership(Reply):
    team: str
    human: str
    role: TeamRole


class MemberRemoved(Reply):
    team: str
    human: str
    removed: bool
    leases_handed_back: int = Field(description="Team todos their endpoints held, back on the queue.")


class TeamLeft(Reply):
    team: str
    left: bool
    leases_handed_back: int = Field(description="Team todos your endpoints held, back on the queue.")


class TeamDeleted(Reply):
    team: str
    deleted: bool


class GrantRequest(Request):
    queue: str = Field(min_length=1, max_length=5 + 32 + 1 + inputs.QUEUE_MAX_CHARS,
                       description="The team queue: its name, or its label team:<team-slug>/<queue>.")
    endpoint: str = Field(min_length=1, max_length=inputs.ID_MAX_CHARS,
                          description="The endpoint's slug (a member's endpoint).")


class Granted(Reply):
    team: str
    queue: str = Field(description="The label team:<team-slug>/<queue>.")
    endpoint: str
    granted: bool
    leases_handed_back: int | None = Field(None, description="On a take-back: the todos it held there, back on "
                                                             "the queue.")


class TeamPushRequest(PushRequest):
    queue: str = Field(description="The team queue: its name, or its label team:<team-slug>/<queue> of this team.")


class TeamPushManyRequest(Request):
    todos: list[TeamPushRequest] = Field(min_length=1, max_length=inputs.PUSH_BATCH_MAX,
                                         description=f"1 to {inputs.PUSH_BATCH_MAX} todos, each with the fields "
                                                     "of a single team push; all are checked before any is pushed.")


# -------------------------------------------------------------------------------------- admission

# The window's fields are checked by the core, which names a bad one `window.<field>`; the document
# describes them.
WindowPeriod = Annotated[Any, WithJsonSchema({"anyOf": [{"type": "string", "enum": list(admission.PERIODS)},
                                                        {"type": "null"}]})]
WindowTz = Annotated[Any, WithJsonSchema({"anyOf": [{"type": "string", "minLength": 1, "maxLength": 64},
                                                    {"type": "null"}]})]
WindowStart = Annotated[Any, WithJsonSchema({"anyOf": [{"type": "string", "pattern": r"^\d\d:\d\d$"},
                                                       {"type": "null"}]})]
WindowWeekday = Annotated[Any, WithJsonSchema({"anyOf": [{"type": "string", "enum": list(admission.WEEKDAYS)},
                                                         {"type": "null"}]})]


class WindowRequest(Request):
    """The window of `max_claims_per_window`; a field left out takes its default."""

    period: WindowPeriod = Field(None, description="hour, day or week (default hour).")
    tz: WindowTz = Field(None, description="An IANA time zone such as Europe/Paris (default UTC).")
    start: WindowStart = Field(None, description="When a window starts, HH:MM from 00:00 to 23:59 (default 00:00).")
    weekday: WindowWeekday = Field(None, description="The day a weekly window starts (mon..sun); weekly windows "
                                                     "only.")


class PolicyRequest(Request):
    max_in_flight: int | None = Field(None, ge=0, le=admission.MAX_IN_FLIGHT_MAX,
                                      description="Leases in flight at most; 0 pauses; null or left out: no limit.")
    max_claims_per_window: int | None = Field(None, ge=0, le=admission.MAX_CLAIMS_MAX,
                                              description="Claims per window at most; 0 pauses; null or left "
                                                          "out: no limit.")
    window: WindowRequest | None = Field(None, description="The window (default: an hour from 00:00 UTC).")
    paused: bool | None = Field(None, description="Pause or resume; left out: as it was.")


class Window(Reply):
    period: str
    tz: str
    start: str
    weekday: str | None


class Policy(Reply):
    """A queue's admission policy with its usage now."""

    queue: str = Field(description="The queue, or a team queue's label team:<team-slug>/<queue>.")
    endpoint: str | None = Field(description="The endpoint's slug for an endpoint's queue; null for a team queue.")
    max_in_flight: int | None
    in_flight: int
    max_claims_per_window: int | None
    used: int = Field(description="Claims charged in the current window.")
    remaining: int | None
    window: Window
    window_resets_at: str | None
    paused: bool
    status: str = Field(description="open, paused, window_exhausted or in_flight_full.")
    pending: int


class PolicyReply(Reply):
    policy: Policy


class PolicyList(Reply):
    policies: list[Policy]


class PolicyCleared(Reply):
    queue: str
    cleared: bool
