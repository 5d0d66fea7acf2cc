"""Servers under test: ours, the bare FastAPI peer, MLServer; and their processes."""
