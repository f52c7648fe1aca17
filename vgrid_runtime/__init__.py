"""Runtime pieces every vgrid package may import: clock, configuration loading, WSGI serving,
JSON HTTP errors (and later TLS)."""
