"""Thin HTTP adapters: parse the request, call :mod:`app.core.service`, shape the response."""
