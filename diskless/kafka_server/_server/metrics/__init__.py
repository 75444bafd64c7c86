"""What operators see: the library's metric events kept for Prometheus, the figures read at
scrape time, consumer lag, readiness checks, and the HTTP endpoint that serves them."""
