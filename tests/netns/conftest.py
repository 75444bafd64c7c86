from testkit.netns import network_of

__all__ = ["network_of"]
