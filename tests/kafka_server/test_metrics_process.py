"""Integration: `python -m diskless.kafka_server --metrics-address HOST:PORT --log-format json`.

A broker process serves its metrics and health on the given address: ready once its broker is
registered, a scrape that `promtool check metrics` accepts, and every line it logs one JSON
object; a clean stop exits 0.
"""

from __future__ import annotations

import json
from pathlib import Path

from testkit.metrics import http_get, promtool_check
from testkit.ports import free_port
from testkit.processes import BrokerProcess


def test_a_broker_process_serves_metrics_health_and_json_logs(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    log = tmp_path / "broker.log"
    options = [
        "--data-dir", str(tmp_path / "data"),
        "--topic", "events:2",
        "--metrics-address", address,
        "--log-format", "json",
        "--log-level", "INFO",
    ]  # fmt: skip
    broker = BrokerProcess(0, 1, options, log)
    broker.start()
    try:
        assert http_get(f"http://{address}/healthz") == (200, "ok\n")
        assert http_get(f"http://{address}/readyz") == (200, "ready\n")
        status, text = http_get(f"http://{address}/metrics")
        assert status == 200
        promtool_check(text)
        assert 'diskless_wal_inflight_bytes_max{broker="0"}' in text
        assert "process_resident_memory_bytes" in text
    finally:
        assert broker.stop() == 0
    lines = [line for line in log.read_text().splitlines() if not line.startswith("--- start")]
    assert lines, "INFO lines at least for the start"
    for line in lines:
        entry = json.loads(line)
        assert {"time", "level", "logger", "message"} <= entry.keys(), entry
    assert any("listening on" in json.loads(line)["message"] for line in lines)
