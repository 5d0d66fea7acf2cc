"""The one description of the HTTP contract: the bodies of ``POST /predict`` and ``POST
/feedback``, and the typed answers. The validator reads its names and options from here,
the OpenAPI document is generated from it, and the Python client parses answers into
these types. Standard library only, so the client can use it without the server's
dependencies."""
