"""Encryption keys for payloads and stored objects (`AGENT_PAYLOAD_KEYS`).

`AGENT_PAYLOAD_KEYS=id1:BASE64KEY,id0:BASE64KEY` lists 256-bit AES keys: the first
encrypts, every one decrypts, so a new key is put first and the old one kept until
nothing written with it is still read. Ciphertext is AES-256-GCM with a fresh 96-bit
nonce; the key id travels beside it (payload metadata, or an object's header), so a
reader knows which key to use and can name a key it lacks.
"""

from __future__ import annotations

import base64
import binascii
import os
import re

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from infra.errors import ConfigError

ENV = "AGENT_PAYLOAD_KEYS"
NONCE_BYTES = 12
_KEY_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class UnknownKey(LookupError):
    """Data was encrypted with a key this process does not have."""


class Keyring:
    """Named AES-256-GCM keys; the first one encrypts."""

    def __init__(self, keys: list[tuple[str, bytes]]):
        if not keys:
            raise ConfigError(f"{ENV} names no key")
        self.primary = keys[0][0]
        self._keys = {key_id: AESGCM(key) for key_id, key in keys}

    @property
    def ids(self) -> list[str]:
        return list(self._keys)

    def encrypt(self, data: bytes) -> tuple[str, bytes]:
        """The primary key's id and nonce + ciphertext of `data`."""
        nonce = os.urandom(NONCE_BYTES)
        return self.primary, nonce + self._keys[self.primary].encrypt(nonce, data, None)

    def decrypt(self, key_id: str, sealed: bytes) -> bytes:
        aead = self._keys.get(key_id)
        if aead is None:
            raise UnknownKey(
                f"data is encrypted with key id {key_id!r}, which is not in {ENV} "
                f"(this process has: {', '.join(self._keys)})"
            )
        try:
            return aead.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], None)
        except InvalidTag:
            raise UnknownKey(
                f"data under key id {key_id!r} does not decrypt with that key: a different key has that id"
            ) from None


def parse_keys(text: str) -> Keyring:
    """The keyring of an `AGENT_PAYLOAD_KEYS` value; a ConfigError names what is wrong."""
    keys: list[tuple[str, bytes]] = []
    for number, item in enumerate(text.split(","), start=1):
        key_id, sep, encoded = item.strip().partition(":")
        if not sep or not _KEY_ID.match(key_id):
            raise ConfigError(f"{ENV}: entry {number} is not id:BASE64KEY (an id of letters, digits, . _ -)")
        try:
            key = base64.b64decode(encoded.strip(), validate=True)
        except binascii.Error:
            raise ConfigError(f"{ENV}: the key of {key_id!r} is not base64") from None
        if len(key) != 32:
            raise ConfigError(
                f"{ENV}: the key of {key_id!r} is {len(key)} bytes; a key is 32 bytes (256 bits)"
            )
        if any(key_id == seen for seen, _ in keys):
            raise ConfigError(f"{ENV}: key id {key_id!r} appears twice")
        keys.append((key_id, key))
    return Keyring(keys)


def keyring_from_env() -> Keyring | None:
    """The keyring of `AGENT_PAYLOAD_KEYS`, or None when it is unset (no encryption)."""
    text = os.environ.get(ENV, "").strip()
    return parse_keys(text) if text else None


def new_key() -> str:
    """A fresh key, base64, for `AGENT_PAYLOAD_KEYS`."""
    return base64.b64encode(os.urandom(32)).decode()
