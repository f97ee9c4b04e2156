"""Files handed to a session with its goal: what each is, by its bytes, and the limits.

A file's type is read from its first bytes (PNG, JPEG, GIF and WebP images, PDF), never
from its name alone; text is UTF-8 without NUL bytes. Images carry their width and
height and PDFs their page count, for the context estimate (activities/context.py). The
limits are the Messages API's: an image's base64 at most 5 MB, a PDF at most 24 MB (its
base64 must fit the 32 MB request), and all of a start's files together within the
request too. Every refusal is one line naming the file.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import struct
from dataclasses import dataclass

from infra.errors import BadRequest

MB = 1024 * 1024
IMAGE_BASE64_LIMIT = 5 * MB  # the API measures an image's base64
PDF_LIMIT = 24 * MB
TEXT_LIMIT = 2 * MB
REQUEST_BASE64_LIMIT = 32 * MB
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
PDF = "application/pdf"
TEXT = "text/plain"
MEDIA_TYPES = (*IMAGE_TYPES, PDF, TEXT)


class AttachmentError(BadRequest):
    """A file that cannot be attached; the text is one line naming it."""


@dataclass(frozen=True)
class Detected:
    media_type: str
    width: int | None = None
    height: int | None = None
    pages: int | None = None


def base64_size(size: int) -> int:
    return 4 * math.ceil(size / 3)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def detect(name: str, data: bytes, declared: str | None = None) -> Detected:
    """What the file is, from its bytes; an unknown type, a declared type its bytes
    contradict, or a file over its limit is an `AttachmentError`."""
    found = _sniff(data)
    if found is None:
        given = f" (declared {declared})" if declared else ""
        raise AttachmentError(
            f"attachment {name}: unknown type{given}; attach PNG, JPEG, GIF or WebP images, PDF or plain text"
        )
    if declared is not None and declared.split(";")[0].strip().lower() != found.media_type:
        raise AttachmentError(f"attachment {name}: declared {declared}, but its bytes are {found.media_type}")
    if found.media_type in IMAGE_TYPES and base64_size(len(data)) > IMAGE_BASE64_LIMIT:
        raise AttachmentError(
            f"attachment {name}: an image may be at most 5 MB as base64 (about 3.75 MB of bytes); "
            f"it is {_mb(base64_size(len(data)))} as base64"
        )
    if found.media_type == PDF and len(data) > PDF_LIMIT:
        raise AttachmentError(f"attachment {name}: a PDF may be at most 24 MB; it is {_mb(len(data))}")
    if found.media_type == TEXT and len(data) > TEXT_LIMIT:
        raise AttachmentError(f"attachment {name}: a text file may be at most 2 MB; it is {_mb(len(data))}")
    return found


def check_total(sizes: list[int]) -> None:
    """All of a start's files, as base64, must fit one request."""
    total = sum(base64_size(s) for s in sizes)
    if total > REQUEST_BASE64_LIMIT:
        raise AttachmentError(
            f"the attachments come to {_mb(total)} as base64; one model request carries at most 32 MB"
        )


def decode_base64(name: str, data: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except ValueError:
        raise AttachmentError(f"attachment {name}: data is not valid base64") from None


def _mb(size: int) -> str:
    return f"{size / MB:.1f} MB"


def _sniff(data: bytes) -> Detected | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return Detected("image/png", width, height)
    if data.startswith(b"\xff\xd8\xff"):
        return Detected("image/jpeg", *_jpeg_size(data))
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return Detected("image/gif", width, height)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return Detected("image/webp", *_webp_size(data))
    if data.startswith(b"%PDF-"):
        return Detected(PDF, pages=_pdf_pages(data))
    if b"\x00" not in data:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return Detected(TEXT)
    return None


def _jpeg_size(data: bytes) -> tuple[int | None, int | None]:
    """Width and height from the first start-of-frame marker."""
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            i += 1
            continue
        marker = data[i + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        (length,) = struct.unpack(">H", data[i + 2 : i + 4])
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return width, height
        i += 2 + length
    return None, None


def _webp_size(data: bytes) -> tuple[int | None, int | None]:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        width = 1 + int.from_bytes(data[24:27], "little")
        height = 1 + int.from_bytes(data[27:30], "little")
        return width, height
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    return None, None


def _pdf_pages(data: bytes) -> int | None:
    """The pages a PDF declares (its page objects; None when they are compressed away)."""
    pages = len(re.findall(rb"/Type\s*/Page(?![s\w])", data))
    return pages or None
