"""The coordinator's rules: pure functions over loaded state, shared by every backend."""
