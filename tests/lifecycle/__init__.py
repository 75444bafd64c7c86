"""Object lifecycle tests: file manager, retention scheduler, and failure races."""
