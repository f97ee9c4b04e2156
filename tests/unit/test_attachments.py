"""Attachments: types by their bytes, sizes and page counts, the limits, and what the
context estimate counts for them."""

from __future__ import annotations

import base64

import pytest

from activities.context import estimate_tokens
from infra.attachments import AttachmentError, check_total, detect
from tests.support import files
from workflows.contract import Attachment


@pytest.mark.parametrize(
    ("data", "media_type", "size"),
    [
        (files.png(64, 48), "image/png", (64, 48)),
        (files.jpeg(800, 600), "image/jpeg", (800, 600)),
        (files.gif(10, 20), "image/gif", (10, 20)),
        (files.webp(300, 200), "image/webp", (300, 200)),
    ],
)
def test_images_are_known_by_their_bytes_not_their_names(data: bytes, media_type: str, size: tuple[int, int]):
    found = detect("photo.txt", data)  # the name says text: the bytes decide
    assert (found.media_type, found.width, found.height) == (media_type, *size)


def test_pdfs_text_and_unknown_files():
    assert detect("a.pdf", files.pdf(3)).pages == 3
    assert detect("notes", "héllo\n".encode()).media_type == "text/plain"
    with pytest.raises(
        AttachmentError, match=r"^attachment a.png: unknown type \(declared image/png\); attach"
    ):
        detect("a.png", b"\x00\x01binary", "image/png")
    with pytest.raises(AttachmentError, match="declared image/png, but its bytes are image/jpeg"):
        detect("a.png", files.jpeg(), "image/png")


def test_the_limits():
    big_image = files.png() + b"\x00" * (4 * 1024 * 1024)  # 5.3 MB as base64
    with pytest.raises(
        AttachmentError, match=r"an image may be at most 5 MB as base64 .* it is 5\.3 MB as base64"
    ):
        detect("big.png", big_image)
    detect("fits.png", files.png() + b"\x00" * (3 * 1024 * 1024))
    with pytest.raises(AttachmentError, match=r"a PDF may be at most 24 MB; it is 24\.0 MB"):
        detect("big.pdf", files.pdf() + b"\x00" * (24 * 1024 * 1024))
    with pytest.raises(AttachmentError, match="at most 32 MB"):
        check_total([20 * 1024 * 1024, 5 * 1024 * 1024])


def test_the_context_estimate_counts_attachments_by_their_own_rules():
    def message(name: str, data: bytes) -> dict:
        found = detect(name, data)
        record = Attachment(name=name, media_type=found.media_type, ref="0" * 64, size=len(data),
                            width=found.width, height=found.height, pages=found.pages)  # fmt: skip
        return {"role": "user", "content": [record.block().model_dump(exclude_none=True)]}

    small = estimate_tokens(message("a.png", files.png(150, 100)))
    assert 20 <= small <= 60  # 150 x 100 / 750 = 20, plus the block's own few tokens
    huge = estimate_tokens(message("b.jpg", files.jpeg(4000, 3000)))
    assert 1500 <= huge <= 1650  # scaled down, at most about 1,600
    assert 6000 <= estimate_tokens(message("c.pdf", files.pdf(2))) <= 6100  # 3,000 a page
    # Not the base64: a 3 MB image is not a million tokens.
    padded = files.png(150, 100) + b"\x00" * (3 * 1024 * 1024)
    assert estimate_tokens(message("d.png", padded)) == small
    as_text = estimate_tokens(
        {"content": [{"type": "image", "source": {"data": base64.b64encode(padded).decode()}}]}
    )
    assert as_text > 1_000_000
