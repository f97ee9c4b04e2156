"""What the real APIs check of image and document blocks, checked the same way by the fakes.

The Messages API (`check_messages`): an image or document block only in a user message;
its source `base64` (or `url`, or for a document `text`); an image's media type one of
PNG, JPEG, GIF, WebP and its bytes of that type; a document's `application/pdf` and its
bytes a PDF; the data valid base64; an image's base64 at most 5 MB; the request at most
32 MB (413). Chat Completions (`check_chat`): content parts only `text` and `image_url`,
images only in user messages, and an image URL `https://` or a `data:` URL of a
supported image type with valid base64. A refusal is (status, message), with the field's
path as the API words it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from typing import Any

IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
IMAGE_BASE64_LIMIT = 5 * 1024 * 1024
REQUEST_LIMIT = 32 * 1024 * 1024
MAGIC = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "application/pdf": (b"%PDF-",),
}
Refusal = tuple[int, str]


def _bytes_are(media_type: str, data: bytes) -> bool:
    if media_type == "image/webp":
        return data[:4] == b"RIFF" and data[8:12] == b"WEBP"
    return data.startswith(MAGIC[media_type])


def _decoded(data: Any) -> bytes | None:
    if not isinstance(data, str):
        return None
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def check_messages(body: dict[str, Any]) -> Refusal | None:
    if len(json.dumps(body)) > REQUEST_LIMIT:
        return 413, "Request exceeds the maximum allowed number of bytes."
    for i, message in enumerate(body.get("messages", [])):
        content = message.get("content")
        for j, block in enumerate(content if isinstance(content, list) else []):
            kind = block.get("type")
            if kind not in ("image", "document"):
                continue
            where = f"messages.{i}.content.{j}.{kind}"
            if message.get("role") != "user":
                return 400, f"messages.{i}.content.{j}: {kind} blocks are only allowed in user messages"
            problem = _source(kind, block.get("source"))
            if problem:
                return 400, f"{where}.source{problem}"
    return None


def _source(kind: str, source: Any) -> str | None:
    if not isinstance(source, dict):
        return ": Field required"
    tag = source.get("type")
    tags = ("base64", "url") if kind == "image" else ("base64", "text", "url", "content")
    if tag not in tags:
        return (
            f": Input tag '{tag}' found using 'type' does not match any of the expected tags: "
            + ", ".join(f"'{t}'" for t in tags)
        )
    if tag == "url":
        return (
            None
            if str(source.get("url", "")).startswith("https://")
            else ".url: only https URLs are supported"
        )
    if tag == "text":
        ok = source.get("media_type") == "text/plain" and isinstance(source.get("data"), str)
        return None if ok else ".media_type: Input should be 'text/plain'"
    if tag == "content":
        return None
    media_type = str(source.get("media_type"))
    allowed = IMAGE_TYPES if kind == "image" else ("application/pdf",)
    if media_type not in allowed:
        return ".base64.media_type: Input should be " + " or ".join(f"'{t}'" for t in allowed)
    data = _decoded(source.get("data"))
    if data is None:
        return ".base64.data: invalid base64 data"
    if kind == "image" and len(source["data"]) > IMAGE_BASE64_LIMIT:
        return (
            f".base64: image exceeds 5 MB maximum: {len(source['data'])} bytes > {IMAGE_BASE64_LIMIT} bytes"
        )
    if not _bytes_are(media_type, data):
        what = "Image" if kind == "image" else "The PDF specified"
        return f".base64.data: {what} does not match the provided media type {media_type}"
    return None


DATA_URL = re.compile(r"^data:(image/[a-z]+);base64,(.*)$", re.S)


def check_chat(body: dict[str, Any]) -> Refusal | None:
    for i, message in enumerate(body.get("messages", [])):
        content = message.get("content")
        for j, part in enumerate(content if isinstance(content, list) else []):
            where = f"messages[{i}].content[{j}]"
            kind = part.get("type")
            if kind == "text":
                continue
            if kind != "image_url":
                return (
                    400,
                    f"Invalid value: '{kind}'. Supported values are: 'text' and 'image_url'. ({where}.type)",
                )
            if message.get("role") != "user":
                return 400, f"Image URLs are only allowed for messages with role 'user' ({where})"
            url = str((part.get("image_url") or {}).get("url", ""))
            if url.startswith("https://"):
                continue
            found = DATA_URL.match(url)
            if found is None or found.group(1) not in IMAGE_TYPES:
                return (
                    400,
                    f"Invalid image URL: expected a https URL or a data URL of a PNG, JPEG, GIF or WebP ({where})",
                )
            data = _decoded(found.group(2))
            if data is None or not _bytes_are(found.group(1), data):
                return (
                    400,
                    f"You uploaded an unsupported image. Please make sure your image is valid. ({where})",
                )
    return None


def compact(value: Any) -> Any:
    """`value` with every image's and document's bytes (base64, or a data URL) replaced by
    their SHA-256: the fakes count tokens on text, and an attachment costs the model far
    less than its base64 would as text (a page, an image: a few thousand tokens at most)."""
    if isinstance(value, list):
        return [compact(v) for v in value]  # pyright: ignore[reportUnknownVariableType]
    if not isinstance(value, dict):
        return value
    fields: dict[str, Any] = {k: compact(v) for k, v in value.items()}  # pyright: ignore[reportUnknownVariableType]
    if fields.get("type") == "base64" and isinstance(fields.get("data"), str):
        fields["data"] = hashlib.sha256(fields["data"].encode()).hexdigest()
    url = fields.get("url")
    if isinstance(url, str) and url.startswith("data:"):
        fields["url"] = hashlib.sha256(url.encode()).hexdigest()
    return fields
