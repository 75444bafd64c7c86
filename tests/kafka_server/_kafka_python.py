"""kafka-python's client classes, imported once with its import-time deprecation warnings muted.

kafka-python loads its protocol schemas with `importlib.resources.read_text`, which warns
"read_text is deprecated" and, inside it, "open_text is deprecated"; the suite filters only the
first, and turns the second into a collection error. Both concern the library, not this code.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", r"(read|open)_text is deprecated", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KpTopicPartition
    from kafka.record.default_records import DefaultRecordBatchBuilder

__all__ = ["DefaultRecordBatchBuilder", "KafkaConsumer", "KafkaProducer", "KpTopicPartition"]
