"""Thin HTTP adapters: parse the request, call :mod:`app.service`, shape the response."""
