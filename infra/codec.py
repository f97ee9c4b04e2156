"""The payload codec: AES-256-GCM on every payload, with the keys of `AGENT_PAYLOAD_KEYS`.

It runs after the pydantic converter and before external storage, so goals, messages,
tool inputs and outputs, and (with the failure converter below) failure messages are
ciphertext in Temporal's database and in the external payload store. An encrypted
payload says `encoding: binary/encrypted` and names its key in `encryption-key-id`;
what is encrypted is the whole original payload, its metadata included.
"""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from infra.keyring import Keyring

ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"


class EncryptionCodec(PayloadCodec):
    """Encrypts with the keyring's first key; decrypts with whichever key a payload names."""

    def __init__(self, keyring: Keyring):
        self._keyring = keyring

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._decrypt(p) for p in payloads]

    def _encrypt(self, payload: Payload) -> Payload:
        key_id, sealed = self._keyring.encrypt(payload.SerializeToString())
        return Payload(metadata={"encoding": ENCODING, KEY_ID: key_id.encode()}, data=sealed)

    def _decrypt(self, payload: Payload) -> Payload:
        # A payload written before encryption was turned on is read as it is.
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        key_id = payload.metadata.get(KEY_ID, b"").decode()
        return Payload.FromString(self._keyring.decrypt(key_id, payload.data))
