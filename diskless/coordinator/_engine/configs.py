"""The engine's dynamic configs of brokers and groups: Kafka's AlterConfigs and
IncrementalAlterConfigs on BROKER and GROUP resources, kept where every broker process sees them.

Kafka keeps them in its metadata log; here a resource's dynamic configs are one row of names and
values, replaced whole in one step that also increments `CONFIG_VERSION_COUNTER`: a broker keeps
a copy and compares that counter to refresh it (one lookup while nothing changes), and the
counter's lock serializes the changes. What a name means and which values it takes is the
Kafka server's to check (its config tables); the coordinator stores what it was given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from diskless.coordinator._engine.base import EngineBase
from diskless.coordinator._store import Changes, Needs, Operation, ReadView, StoreStep
from diskless.coordinator._values import CONFIG_VERSION_COUNTER, ConfigResourceType


class ConfigOperations(EngineBase):
    async def alter_resource_configs(
        self,
        resource_type: ConfigResourceType,
        name: str,
        configs: Mapping[str, str],
        expected: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        key = (int(resource_type), name)
        wanted = dict(configs)
        needs = Needs(resource_configs=(key,), counters=(CONFIG_VERSION_COUNTER,))

        async def alter(db: StoreStep) -> dict[str, str]:
            snapshot = await db.load(needs)
            stored = dict(snapshot.resource_configs.get(key, {}))
            if expected is not None and stored != dict(expected):
                return stored  # another change came first: the caller decides again
            if stored != wanted:
                version = snapshot.counters.get(CONFIG_VERSION_COUNTER, 0) + 1
                await db.apply(
                    Changes(
                        resource_configs={key: wanted}, counters={CONFIG_VERSION_COUNTER: version}
                    )
                )
            return wanted

        return await self._write(Operation.ALTER_RESOURCE_CONFIGS, alter)

    async def describe_resource_configs(
        self, resource_type: ConfigResourceType, names: Sequence[str] | None = None
    ) -> dict[str, dict[str, str]]:
        named = None if names is None else list(names)
        return await self._read(lambda view: view.resource_configs(int(resource_type), named))

    async def config_version(self) -> int:
        return await self._read(_config_version)


async def _config_version(view: ReadView) -> int:
    return await view.counter(CONFIG_VERSION_COUNTER)
