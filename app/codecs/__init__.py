"""Codecs: each protocol's request body to one inference request, and its result back to bytes."""
