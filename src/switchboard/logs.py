"""Structured logs: one JSON object per line (or plain text), never a secret. By default
(SWITCHBOARD_LOG_FORMAT=auto) a terminal gets text and anything else gets JSON.

Callers pass context in `extra=`; only whitelisted keys are written, so a summary, artifact,
credential or lease token cannot reach a log line by accident. The same handler serves the libraries
underneath (uvicorn, the MCP SDK, asyncio): their records become lines of the same format, never a
bare traceback. An exception that only says the client went away (a closed socket, a request body
cut short) becomes one line `client disconnected` with the exception's class as `error`.
"""

from __future__ import annotations

import json
import logging
import sys
import time

DISCONNECTS = ("ClientDisconnect", "ClosedResourceError", "BrokenResourceError", "EndOfStream",
               "ConnectionResetError", "BrokenPipeError", "ConnectionAbortedError", "CancelledError")

SAFE_KEYS = ("endpoint", "endpoint_id", "verb", "todo_id", "outcome", "code", "latency_ms", "method", "path",
             "status", "queue", "session", "sweep", "client", "attempt_seq", "state", "event", "target",
             "delivery", "human", "reason", "applied", "url", "board", "mcp", "sqlstate")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
               "level": record.levelname.lower(), "logger": record.name, "msg": record.getMessage()}
        for key in SAFE_KEYS:
            if key in record.__dict__:
                out[key] = record.__dict__[key]
        if record.exc_info and record.exc_info[0] is not None:
            out["error"] = record.exc_info[0].__name__
        elif isinstance(record.__dict__.get("error"), str):
            out["error"] = record.__dict__["error"]
        return json.dumps(out, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ctx = " ".join(f"{k}={record.__dict__[k]}" for k in SAFE_KEYS if k in record.__dict__)
        line = f"{record.levelname.lower():7} {record.name}: {record.getMessage()}"
        if record.exc_info and record.exc_info[0] is not None:
            line += f" error={record.exc_info[0].__name__}"
        elif isinstance(record.__dict__.get("error"), str):
            line += f" error={record.__dict__['error']}"
        return f"{line} {ctx}".rstrip()


def _disconnect(exc: BaseException | None) -> BaseException | None:
    """The client-went-away exception behind `exc` (itself, a cause, or every member of a group)."""
    seen = 0
    while exc is not None and seen < 8:
        seen += 1
        group = getattr(exc, "exceptions", None)
        if group:
            found = [_disconnect(e) for e in group]
            return found[0] if all(found) else None
        if type(exc).__name__ in DISCONNECTS:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


class DisconnectFilter(logging.Filter):
    """A record whose exception is only a client disconnect becomes one short line, no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            gone = _disconnect(record.exc_info[1])
            if gone is not None:
                record.msg, record.args = "client disconnected", None
                record.levelno, record.levelname = logging.INFO, "INFO"
                record.exc_info = None
                record.exc_text = None
                record.__dict__["reason"] = "client_disconnect"
                record.__dict__["error"] = type(gone).__name__
        return True


def choose_format(fmt: str, stream) -> str:
    """`json` or `text` as asked; for `auto`, text when the stream is a terminal (a person reads it),
    JSON otherwise (a collector does)."""
    if fmt in ("json", "text"):
        return fmt
    isatty = getattr(stream, "isatty", None)
    try:
        return "text" if isatty is not None and isatty() else "json"
    except ValueError:  # a closed stream
        return "json"


def configure(level: str = "info", fmt: str = "auto", stream=None) -> None:
    stream = stream or sys.stderr
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if choose_format(fmt, stream) == "json" else TextFormatter())
    handler.addFilter(DisconnectFilter())
    ours = logging.getLogger("switchboard")
    ours.handlers[:] = [handler]
    ours.setLevel(level.upper())
    ours.propagate = False
    # Everything else (uvicorn, the MCP SDK, asyncio, anyio) through the same handler, warnings and up.
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(logging.WARNING, ours.level))
