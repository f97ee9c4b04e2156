"""Shared infrastructure: the Temporal connection and its data converter, the payload codec
and store, the object stores, keys, the data directory, agent definitions, telemetry set-up,
the project's errors and the command lines' argument types."""
