"""The REST adapters over :mod:`app.core`: routes, body reading, error responses, the
request middleware and the typed OpenAPI document."""
