"""The project's own configuration errors, raised where a setting is read.

Every entry point turns a `ConfigError` into one line on stderr: the message names the
setting and says what was expected, so no traceback is needed.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting in the environment is malformed."""
