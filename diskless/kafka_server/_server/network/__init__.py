"""A broker's listeners and their connections: accepting (TLS, the peer's principal, SASL),
framing, responses in request order, the request byte budget, and rate-limited warnings. The
connections know no API: the dispatcher hands each request to its route in the handler table."""
