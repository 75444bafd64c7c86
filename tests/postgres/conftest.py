from testkit.postgres import postgres_dsn, postgres_server

__all__ = ["postgres_dsn", "postgres_server"]
