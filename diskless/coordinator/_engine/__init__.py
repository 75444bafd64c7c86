"""The coordinator engine: every `BatchCoordinator` operation written once over a store, its
modules named as the rules they apply (`_rules`)."""

from diskless.coordinator._engine.engine import CoordinatorEngine

__all__ = ["CoordinatorEngine"]
