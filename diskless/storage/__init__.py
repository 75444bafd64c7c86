"""Object stores: the interface and its backends."""

from diskless.storage._base import ListPage, ObjectInfo, ObjectStore

__all__ = ["ListPage", "ObjectInfo", "ObjectStore"]
