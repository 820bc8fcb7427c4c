"""The payload codecs on their own: AES-256-GCM with key ids (rotation, unknown keys,
tampering, the metadata bound as associated data), zlib compression, chaining, and the
pass-through of payloads a codec did not write (docs/engine.md, "Payload codecs")."""

from __future__ import annotations

import os

import pytest

from durable_rpc import converter
from durable_rpc.codec import (
    ENCODING,
    ENCODING_ENCRYPTED,
    ENCODING_ZLIB,
    KEY_ID,
    AesGcmCodec,
    CompositeCodec,
    CompressionCodec,
    describe,
)
from durable_rpc.errors import (
    PayloadCodecError,
    PayloadDecryptFailedError,
    PayloadKeyUnknownError,
)
from durable_rpc.v1.payload_pb2 import Payload

K1 = bytes(range(32))
K2 = bytes(range(32, 64))


def frame(value: object) -> Payload:
    return Payload(data=converter.encode(value))


def test_aes_round_trips_and_seals_each_payload_with_its_own_nonce() -> None:
    codec = AesGcmCodec(keys={"k1": K1}, encrypt_with="k1")
    plain = [frame("top secret"), frame("top secret"), Payload(data=b"", metadata={"x": "y"})]
    sealed = codec.encode(plain)
    assert [p.metadata[ENCODING] for p in sealed] == [ENCODING_ENCRYPTED] * 3
    assert all(p.metadata[KEY_ID] == "k1" for p in sealed)
    assert b"top secret" not in b"".join(p.data for p in sealed)
    # Random 96-bit nonces: the same value never seals to the same bytes.
    assert sealed[0].data[:12] != sealed[1].data[:12] and sealed[0].data != sealed[1].data
    # The inner payload comes back whole, its own metadata too.
    assert codec.decode(sealed) == plain
    assert describe(sealed[0]) == "<encrypted: key k1>"


def test_rotation_seals_with_the_new_key_and_still_opens_the_old_one() -> None:
    old = AesGcmCodec(keys={"k1": K1}, encrypt_with="k1")
    rotated = AesGcmCodec(keys={"k1": K1, "k2": K2}, encrypt_with="k2")
    by_old = old.encode([frame(1)])[0]
    by_new = rotated.encode([frame(2)])[0]
    assert by_new.metadata[KEY_ID] == "k2"
    assert rotated.decode([by_old, by_new]) == [frame(1), frame(2)]
    with pytest.raises(PayloadKeyUnknownError) as caught:
        old.decode([by_new])
    assert caught.value.reason == "PAYLOAD_KEY_UNKNOWN"
    assert "'k2'" in caught.value.message and "k1" in caught.value.message


def test_a_tampered_payload_fails_to_decrypt_never_decodes_to_something_else() -> None:
    codec = AesGcmCodec(keys={"k1": K1, "k2": K2}, encrypt_with="k1")
    sealed = codec.encode([frame("pay 10")])[0]
    flipped = Payload()
    flipped.CopyFrom(sealed)
    flipped.data = sealed.data[:-1] + bytes([sealed.data[-1] ^ 1])
    relabelled = Payload()
    relabelled.CopyFrom(sealed)
    relabelled.metadata[KEY_ID] = "k2"  # another key the reader holds
    extra = Payload()
    extra.CopyFrom(sealed)
    extra.metadata["encryption-cipher"] = "AES-256-GCM"
    extra.metadata["note"] = "added"  # the metadata is associated data
    cut = Payload(data=sealed.data[:20], metadata=sealed.metadata)
    for bad in (flipped, relabelled, extra, cut):
        with pytest.raises(PayloadDecryptFailedError) as caught:
            codec.decode([bad])
        assert caught.value.reason == "PAYLOAD_DECRYPT_FAILED"
    wrong = AesGcmCodec(keys={"k1": K2}, encrypt_with="k1")  # same id, other key
    with pytest.raises(PayloadDecryptFailedError):
        wrong.decode([sealed])


def test_payloads_no_codec_wrote_pass_through_decode() -> None:
    codec = CompositeCodec(
        [CompressionCodec(min_bytes=0), AesGcmCodec(keys={"k1": K1}, encrypt_with="k1")]
    )
    plain = [frame({"a": 1}), frame(None), Payload(data=b"x", metadata={ENCODING: "x/other"})]
    decoded = codec.decode(plain)
    assert decoded == plain


def test_compression_shrinks_repetitive_payloads_and_skips_the_rest() -> None:
    codec = CompressionCodec(min_bytes=100)
    big = frame("abc" * 10_000)
    small = frame("abc")
    random = Payload(data=os.urandom(512))  # does not shrink
    packed = codec.encode([big, small, random])
    assert packed[0].metadata[ENCODING] == ENCODING_ZLIB
    assert packed[0].ByteSize() < big.ByteSize() // 20
    assert packed[1] is small and packed[2] is random
    assert codec.decode(packed) == [big, small, random]
    with pytest.raises(PayloadCodecError) as caught:
        codec.decode([Payload(data=b"not zlib", metadata={ENCODING: ENCODING_ZLIB})])
    assert caught.value.reason == "PAYLOAD_CODEC_FAILED"


def test_a_chain_compresses_then_encrypts_and_undoes_it_in_reverse() -> None:
    aes = AesGcmCodec(keys={"k1": K1}, encrypt_with="k1")
    chain = CompositeCodec([CompressionCodec(min_bytes=10), aes])
    value = frame("the same words " * 1000)
    (sealed,) = chain.encode([value])
    assert sealed.metadata[ENCODING] == ENCODING_ENCRYPTED
    # Encrypted outside, compressed inside: compression worked before encryption.
    assert len(sealed.data) < len(value.data) // 20
    (inner,) = aes.decode([sealed])
    assert inner.metadata[ENCODING] == ENCODING_ZLIB
    assert chain.decode([sealed]) == [value]


@pytest.mark.parametrize(
    ("keys", "encrypt_with", "problem"),
    [
        ({}, "k1", "at least one key"),
        ({"k1": b"short"}, "k1", "32 bytes"),
        ({"k1": K1}, "k2", "not one of the key ids"),
        ({"": K1}, "", "non-empty"),
    ],
)
def test_aes_refuses_a_bad_configuration(
    keys: dict[str, bytes], encrypt_with: str, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        AesGcmCodec(keys=keys, encrypt_with=encrypt_with)
