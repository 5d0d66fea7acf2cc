"""The serving logic, with no HTTP in it: the service, the loaded bundle, validation,
batching, the data plane's types, following ``LATEST``, draining, and access roles."""
