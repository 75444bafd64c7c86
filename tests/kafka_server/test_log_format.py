"""Unit: `--log-format json` writes each record as one JSON object on one line."""

from __future__ import annotations

import json
import logging
import sys

from diskless.kafka_server._server.process.log_format import JsonFormatter


def test_a_record_with_newlines_and_a_traceback_is_one_json_line() -> None:
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "diskless.test", logging.WARNING, __file__, 1, "two\nlines: %s", ("é",), exc_info
    )
    record.created = 1_700_000_000.123
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["time"] == "2023-11-14T22:13:20.123Z"
    assert entry["level"] == "WARNING"
    assert entry["logger"] == "diskless.test"
    assert entry["message"] == "two\nlines: é"
    assert entry["exception"].startswith("Traceback")
    assert entry["exception"].rstrip().endswith("ValueError: bad\nvalue")
