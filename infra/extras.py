"""The optional extras (pyproject.toml), and the settings that need them.

`AGENT_STORE_URL=s3://...` needs the `s3` extra; tracing or OTLP metrics (`OTEL_*`) and
the worker's `--metrics-port` need `otel`; the codec endpoint for the Temporal UI needs
`codec`. A process checks the settings it has as it starts (`check_settings()`, also
run by `infra.connection.connect`), so a missing extra stops it with one line naming the
extra to install, never later as a `ModuleNotFoundError` in every model call.
"""

from __future__ import annotations

import importlib.util
import os

from infra import otel
from infra.errors import ConfigError

# What each extra installs, as the modules this project imports from it.
MODULES = {
    "s3": ("aioboto3",),
    "otel": (
        "opentelemetry.sdk",
        "opentelemetry.exporter.otlp.proto.http",
        "opentelemetry.exporter.otlp.proto.grpc",
        "opentelemetry.exporter.prometheus",
        "prometheus_client",
    ),
    "codec": ("starlette", "uvicorn"),
}


class MissingExtra(ConfigError):
    """A setting needs an extra that is not installed."""


def installed(module: str) -> bool:
    """Whether `module` can be imported (found on the path; nothing is imported but its parents)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package is missing, or blocked in sys.modules
        return False


def require(extra: str, setting: str) -> None:
    """`MissingExtra` naming `setting` and the extra to install, unless all of it is installed."""
    if not all(installed(module) for module in MODULES[extra]):
        raise MissingExtra(f"{setting} needs the {extra} extra: pip install -e '.[{extra}]'")


def check_settings() -> None:
    """The extras the environment's settings need: `AGENT_STORE_URL` and the `OTEL_*` variables."""
    url = os.environ.get("AGENT_STORE_URL", "").strip()
    if url.startswith("s3:"):  # a malformed URL is ConfigError's to say, where it is read
        require("s3", f"AGENT_STORE_URL={url}")
    telemetry = otel.enabled_by()
    if telemetry is not None:
        require("otel", telemetry)
