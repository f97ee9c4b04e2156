"""`python -m infra.codec_server`: Temporal's remote codec endpoint, so the Temporal UI
(and `temporal --codec-endpoint`) can show the payloads that AGENT_PAYLOAD_KEYS encrypts.

`POST /decode` and `POST /encode` take and answer `{"payloads": [...]}` in Temporal's
JSON form. The keys stay in this process; a browser sends it ciphertext and gets
plaintext back, so who may call it matters: bound to a loopback address it serves the
UI's origin without a token, on any other address it requires `Authorization: Bearer
<token>` (the UI's "pass access token" setting) and refuses to start without one. It
needs the `codec` extra (Starlette and uvicorn), imported only when it runs.
"""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from infra import extras
from infra.arguments import OneLineParser, port_number
from infra.errors import AgentError, ConfigError

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from infra.keyring import Keyring

TOKEN_ENV = "AGENT_CODEC_TOKEN"
UI_ORIGINS = ["http://localhost:8233", "http://127.0.0.1:8233"]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_app(keyring: Keyring, *, origins: list[str], token: str | None) -> Starlette:
    """The codec endpoint's app: encode, decode, CORS for the UI's origins, and the token check."""
    from google.protobuf import json_format
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route
    from temporalio.api.common.v1 import Payloads

    from infra.codec import EncryptionCodec
    from infra.keyring import UnknownKey

    codec = EncryptionCodec(keyring)

    def authorised(request: Request) -> bool:
        if token is None:
            return True
        given = request.headers.get("authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())

    def handler(convert):
        async def endpoint(request: Request) -> Response:
            if not authorised(request):
                return JSONResponse({"message": "a bearer token is required"}, status_code=401)
            try:
                payloads = json_format.Parse(await request.body(), Payloads())
                converted = await convert(list(payloads.payloads))
            except json_format.ParseError as err:
                return JSONResponse({"message": f"not a payloads document: {err}"}, status_code=400)
            except UnknownKey as err:
                return JSONResponse({"message": str(err)}, status_code=422)
            body = json_format.MessageToJson(Payloads(payloads=converted))
            return Response(body, media_type="application/json")

        return endpoint

    return Starlette(
        routes=[Route("/encode", handler(codec.encode), methods=["POST"]), Route("/decode", handler(codec.decode), methods=["POST"])],
        middleware=[Middleware(
            CORSMiddleware, allow_origins=origins, allow_methods=["POST"], allow_credentials=True,
            allow_headers=["content-type", "x-namespace", "authorization"],
        )],
    )  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = OneLineParser(
        prog="python -m infra.codec_server", description=(__doc__ or "").partition("\n")[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=port_number, default=8234)
    parser.add_argument(
        "--origin", action="append", help=f"an origin the UI is served from (default {' '.join(UI_ORIGINS)})"
    )
    return parser.parse_args(argv)


def configured_app(args: argparse.Namespace) -> Starlette:
    """The app for these arguments and the environment; a ConfigError says what is missing."""
    from infra.keyring import keyring_from_env

    keyring = keyring_from_env()
    if keyring is None:
        raise ConfigError("AGENT_PAYLOAD_KEYS is not set: the codec endpoint has no key to decode with")
    token = os.environ.get(TOKEN_ENV) or None
    if token is None and not is_loopback(args.host):
        raise ConfigError(
            f"the codec endpoint on {args.host} (not loopback) needs a bearer token in {TOKEN_ENV}"
        )
    return build_app(keyring, origins=args.origin or UI_ORIGINS, token=token)


def spawn(port: int, log_file: Path, ui_port: int = 8233) -> subprocess.Popen:
    """This module as a process on 127.0.0.1 for the dev server's UI on `ui_port`; end it by its PID."""
    out = open(log_file, "ab")
    origins = [arg for host in ("localhost", "127.0.0.1") for arg in ("--origin", f"http://{host}:{ui_port}")]
    return subprocess.Popen(
        [sys.executable, "-m", "infra.codec_server", "--port", str(port), *origins],
        stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        extras.require("codec", "the codec endpoint")
        app = configured_app(args)
    except AgentError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    import uvicorn

    print(json.dumps({"codec_endpoint": f"http://{args.host}:{args.port}"}), flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
