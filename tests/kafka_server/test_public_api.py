"""The package's public surface is exactly what `__all__` names (unit test)."""

from __future__ import annotations

import diskless.kafka_server as kafka_server


def test_all_is_exactly_the_public_names() -> None:
    public = {name for name in vars(kafka_server) if not name.startswith("_")}
    assert set(kafka_server.__all__) == public
    assert len(kafka_server.__all__) == len(set(kafka_server.__all__))
