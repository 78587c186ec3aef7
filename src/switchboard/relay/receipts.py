"""Worker receipts: reading them, turning an attempt into a verdict, and carrying the receipt in the
attempt's summary.

A worker may write a JSON receipt to `RELAY_RECEIPT_FILE`:
`{"result": "success"|"failure", "summary", "files_changed", "error_category", "error_summary",
"suggestion", "artifact"}`. Exit 0 without a receipt is a success; a non-zero exit without one is a failure
with category `unknown`. The server keeps one short text per attempt (2048 bytes), so the receipt travels
there as compact JSON, most useful fields first, shortened from the least useful end when it would not
fit. That makes the ledger rebuildable from the server alone.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

SUMMARY_MAX_BYTES = 2048
RECEIPT_READ_MAX_BYTES = 64 * 1024
ARTIFACT_MAX_BYTES = 512
CATEGORY_MAX_CHARS = 64
ELLIPSIS = "…"

RESULTS = ("success", "failure")
# The order fields appear in the summary: what a retry needs most comes first.
SUMMARY_ORDER = ("result", "gate", "error_category", "error_summary", "suggestion", "summary", "files_changed",
                 "exit", "duration_s", "note", "cut")
# What gives way first when the summary is too long; `result`, `gate` and `error_category` never do.
SHRINK_ORDER = ("note", "files_changed", "summary", "suggestion", "error_summary")
TEXT_FIELDS = ("summary", "error_category", "error_summary", "suggestion")

_CAIRN = re.compile(r"^mcp://cairn/[A-Za-z0-9_-]{1,64}$")
_SECRET_PATTERNS = (re.compile(r"\bsb[kh]_[A-Za-z0-9_-]{8,}"), re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}"))


@dataclass
class Verdict:
    """How one attempt went, as the relay reports it."""

    result: str  # success | failure
    fields: dict[str, Any] = field(default_factory=dict)  # receipt fields in SUMMARY_ORDER terms
    artifact: str | None = None
    gate: str | None = None  # set by gating: the reason this attempt stops the task

    @property
    def ok(self) -> bool:
        return self.result == "success"

    @property
    def category(self) -> str | None:
        return self.fields.get("error_category")


# -------------------------------------------------------------------------------------- reading

def read_receipt(path) -> tuple[dict | None, str | None]:
    """(receipt, problem). A missing file is (None, None); an unusable one is (None, what was wrong)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(RECEIPT_READ_MAX_BYTES + 1)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"receipt file unreadable: {exc.strerror}"
    if len(raw) > RECEIPT_READ_MAX_BYTES:
        return None, f"receipt file larger than {RECEIPT_READ_MAX_BYTES // 1024} KiB"
    if not raw.strip():
        return None, None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"receipt file is not valid JSON ({getattr(exc, 'msg', 'not UTF-8')})"
    if not isinstance(data, dict):
        return None, "receipt file must hold a JSON object"
    return normalise(data)


def normalise(data: dict) -> tuple[dict | None, str | None]:
    """Keep the documented fields with the right types; say what was wrong with the rest."""
    out: dict[str, Any] = {}
    problems = []
    result = data.get("result")
    if result is not None:
        if result in RESULTS:
            out["result"] = result
        else:
            problems.append("result must be success or failure")
    for key in TEXT_FIELDS:
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            problems.append(f"{key} must be a string")
            continue
        value = value.strip()
        if key == "error_category":
            value = re.sub(r"[^A-Za-z0-9_.:-]+", "_", value)[:CATEGORY_MAX_CHARS]
        if value:
            out[key] = value
    files = data.get("files_changed")
    if files is not None:
        if isinstance(files, list) and all(isinstance(f, str) for f in files):
            out["files_changed"] = files
        else:
            problems.append("files_changed must be a list of strings")
    artifact = data.get("artifact")
    if artifact is not None:
        if isinstance(artifact, str):
            out["artifact"] = artifact
        else:
            problems.append("artifact must be a string")
    return out, ("receipt: " + "; ".join(problems)) if problems else None


def artifact_problem(value: str) -> str | None:
    """None when the server would accept this artifact: `mcp://cairn/<id>` or an https URL, ≤ 512 bytes."""
    if len(value.encode("utf-8", "replace")) > ARTIFACT_MAX_BYTES:
        return f"artifact longer than {ARTIFACT_MAX_BYTES} bytes"
    if _CAIRN.match(value):
        return None
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in value):
        return "artifact is not an https URL or an mcp://cairn/ reference"
    try:
        parts = urlsplit(value)
    except ValueError:
        parts = None
    if parts is None or parts.scheme != "https" or not parts.hostname:
        return "artifact is not an https URL or an mcp://cairn/ reference"
    return None


# --------------------------------------------------------------------------------------- verdict

def decide(*, exit_code: int | None, timed_out: bool, receipt: dict | None, receipt_problem: str | None,
           output_tail: str = "", timeout_minutes: float | None = None) -> Verdict:
    """Turn what the worker did into a verdict (the worker contract in docs/relay.md)."""
    fields: dict[str, Any] = {}
    notes = []
    if receipt:
        fields.update({k: v for k, v in receipt.items() if k not in ("result", "artifact")})
    if receipt_problem:
        notes.append(receipt_problem)
    claimed = (receipt or {}).get("result")
    fields["exit"] = "timeout" if timed_out else exit_code

    if timed_out:
        result = "failure"
        fields["error_category"] = "timeout"
        fields["error_summary"] = f"worker killed at the timeout ({_minutes(timeout_minutes)})"
    elif exit_code is None or exit_code < 0:
        result = "failure"
        signal_no = -(exit_code or 0)
        fields.setdefault("error_category", "unknown")
        fields["error_summary"] = f"worker killed by signal {signal_no}" + _tail(output_tail)
    elif claimed == "failure":
        result = "failure"
        fields.setdefault("error_category", "unknown")
        if "error_summary" not in fields:
            fields["error_summary"] = fields.get("summary") or f"worker reported failure (exit {exit_code})"
    elif exit_code != 0:
        result = "failure"
        fields.setdefault("error_category", "unknown")
        if claimed == "success":
            fields["error_summary"] = f"worker exited {exit_code} after reporting success"
        elif "error_summary" not in fields:
            fields["error_summary"] = f"worker exited {exit_code} without a receipt" + _tail(output_tail)
    else:
        result = "success"
        for key in ("error_category", "error_summary"):
            fields.pop(key, None)

    artifact = None
    if receipt and receipt.get("artifact"):
        problem = artifact_problem(receipt["artifact"])
        if problem:
            notes.append(problem + "; not sent")
        else:
            artifact = receipt["artifact"]
    if notes:
        fields["note"] = "; ".join(notes)
    return Verdict(result=result, fields=fields, artifact=artifact)


def gate_failure(verdict: Verdict, *, exit_code: int | None, timed_out: bool, output_tail: str) -> Verdict:
    """A quality gate refused a success: the attempt becomes a failure carrying the gate's output."""
    fields = dict(verdict.fields)
    fields["error_category"] = "quality_gate"
    what = "timed out" if timed_out else f"exited {exit_code}"
    fields["error_summary"] = f"quality gate {what}" + _tail(output_tail, 1200)
    return Verdict(result="failure", fields=fields, artifact=verdict.artifact)


def _minutes(value: float | None) -> str:
    if value is None:
        return "timeout_minutes"
    return f"timeout_minutes={value:g}"


def _tail(text: str, limit: int = 600) -> str:
    text = (text or "").strip()
    if not text:
        return ""
    if len(text) > limit:
        text = ELLIPSIS + text[-limit:]
    return ": " + text


# ------------------------------------------------------------------------------- summary encoding

def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub("[redacted]", text)
    return text


def _dump(d: dict) -> str:
    return json.dumps(d, separators=(",", ":"), ensure_ascii=False)


def _size(d: dict) -> int:
    return len(_dump(d).encode("utf-8"))


def encode_summary(fields: dict[str, Any], *, limit: int = SUMMARY_MAX_BYTES, secrets: tuple[str, ...] = ()) -> str:
    """Compact JSON of the receipt, most useful fields first, never longer than `limit` bytes."""
    d: dict[str, Any] = {}
    for key in SUMMARY_ORDER:
        value = fields.get(key)
        if value is None or value == "" or value == []:
            continue
        if isinstance(value, str):
            value = redact(value, secrets)
        elif key == "files_changed":
            value = [redact(str(v), secrets) for v in value]
        d[key] = value
    if _size(d) <= limit:
        return _dump(d)
    d["cut"] = True
    for key in SHRINK_ORDER:
        if _size(d) <= limit:
            break
        if key not in d:
            continue
        value = d[key]
        if isinstance(value, list):
            while value and _size(d) > limit:
                value.pop()
            if not value:
                del d[key]
        else:
            _shrink_text(d, key, limit)
    if _size(d) > limit:  # only the kept fields are left; cut the category as a last resort
        _shrink_text(d, "error_category", limit)
    return _dump(d)


def _shrink_text(d: dict, key: str, limit: int) -> None:
    """Cut d[key] on a character boundary (ending with …) to the longest prefix that fits, or drop it."""
    text = d.get(key)
    if not isinstance(text, str):
        return
    lo, hi = 0, len(text)
    best = None
    while lo <= hi:
        mid = (lo + hi) // 2
        d[key] = text[:mid] + ELLIPSIS
        if _size(d) <= limit:
            best = mid
            lo = mid + 1
        else:
            hi = mid - 1
    if best is None or best == 0:
        del d[key]
    else:
        d[key] = text[:best] + ELLIPSIS


def parse_summary(summary: str | None) -> dict | None:
    """The receipt carried in an attempt summary, or None when the summary is not one of ours."""
    if not summary or not summary.startswith("{"):
        return None
    try:
        data = json.loads(summary)
    except json.JSONDecodeError:
        return None
    if isinstance(data, dict) and data.get("result") in ("success", "failure", "released"):
        return data
    return None
