"""The deterministic agent loop and its message handlers."""
