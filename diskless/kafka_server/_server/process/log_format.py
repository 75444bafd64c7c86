"""The process's log lines: text for people, or one JSON object per line for log collectors.

A JSON line has `time` (UTC, ISO 8601 with milliseconds), `level`, `logger`, `message`, and
`exception` when a traceback is attached: newlines inside a message or a traceback are escaped,
so a collector never splits one event into several.
"""

from __future__ import annotations

import datetime
import json
import logging
from typing import Final

TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        moment = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        entry: dict[str, object] = {
            "time": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging(level: str, log_format: str) -> None:
    """The root logger at `level`, writing `log_format` ("text" or "json") to stderr."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)
