"""Producer-state and transaction rules, shared by every coordinator backend."""
