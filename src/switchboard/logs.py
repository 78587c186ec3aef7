"""Structured logs: one JSON object per line (or plain text), never a secret.

Callers pass context in `extra=`; only whitelisted keys are written, so a summary, artifact,
credential or lease token cannot reach a log line by accident.
"""

from __future__ import annotations

import json
import logging
import sys
import time

SAFE_KEYS = ("endpoint", "endpoint_id", "verb", "todo_id", "outcome", "code", "latency_ms", "method", "path",
             "status", "queue", "session", "sweep", "client", "attempt_seq", "state", "event", "target",
             "delivery", "human", "reason", "applied", "url", "board", "mcp")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
               "level": record.levelname.lower(), "logger": record.name, "msg": record.getMessage()}
        for key in SAFE_KEYS:
            if key in record.__dict__:
                out[key] = record.__dict__[key]
        if record.exc_info and record.exc_info[0] is not None:
            out["error"] = record.exc_info[0].__name__
        return json.dumps(out, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ctx = " ".join(f"{k}={record.__dict__[k]}" for k in SAFE_KEYS if k in record.__dict__)
        line = f"{record.levelname.lower():7} {record.name}: {record.getMessage()}"
        if record.exc_info and record.exc_info[0] is not None:
            line += f" error={record.exc_info[0].__name__}"
        return f"{line} {ctx}".rstrip()


def configure(level: str = "info", fmt: str = "json", stream=None) -> None:  # noqa: ANN001
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger("switchboard")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
