"""Ed25519 keys and signatures (``protocol keygen``), and DSSE envelopes for link records."""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from creditaudit.errors import InputError

__all__ = [
    "PRIVATE_KEY_NAME",
    "PUBLIC_KEY_NAME",
    "Signer",
    "generate_keypair",
    "load_signer",
    "load_public_key",
    "public_key_from_b64",
    "verify_signature",
    "key_id",
    "pae",
]

PRIVATE_KEY_NAME = "creditaudit.key"
PUBLIC_KEY_NAME = "creditaudit.pub"


def _raw_public(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(public: Ed25519PublicKey) -> str:
    """SHA-256 (hex) of the raw 32-byte public key."""
    return hashlib.sha256(_raw_public(public)).hexdigest()


@dataclass(frozen=True)
class Signer:
    """A loaded private key."""

    private_key: Ed25519PrivateKey

    @property
    def public_key(self) -> Ed25519PublicKey:
        return self.private_key.public_key()

    @property
    def public_key_b64(self) -> str:
        return base64.b64encode(_raw_public(self.public_key)).decode("ascii")

    @property
    def key_id(self) -> str:
        return key_id(self.public_key)

    def sign(self, message: bytes) -> str:
        """Base64 Ed25519 signature of ``message``."""
        return base64.b64encode(self.private_key.sign(message)).decode("ascii")


def generate_keypair(directory: str | Path) -> tuple[Path, Path]:
    """Write a new Ed25519 key pair into ``directory``; refuse to overwrite an existing key."""
    directory = Path(directory)
    private_path = directory / PRIVATE_KEY_NAME
    public_path = directory / PUBLIC_KEY_NAME
    for path in (private_path, public_path):
        if path.exists():
            raise InputError(f"{path}: a key already exists; keygen never overwrites keys (choose another --out)")
    directory.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(private_pem)
    public_path.write_bytes(public_pem)
    return private_path, public_path


def load_signer(path: str | Path) -> Signer:
    """Load an Ed25519 private key (PEM, PKCS8) written by ``protocol keygen``."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the private key ({exc.strerror}); create one with `creditaudit protocol keygen`") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise InputError(f"{path}: not a readable unencrypted PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise InputError(f"{path}: the key is not an Ed25519 key (creditaudit signs with Ed25519)")
    return Signer(key)


def load_public_key(path: str | Path) -> Ed25519PublicKey:
    """Load an Ed25519 public key (PEM) written by ``protocol keygen``."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the public key ({exc.strerror})") from None
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise InputError(f"{path}: not a readable PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise InputError(f"{path}: the key is not an Ed25519 public key")
    return key


def public_key_from_b64(text: str) -> Ed25519PublicKey:
    """An Ed25519 public key from its base64 raw encoding (as stored in locks)."""
    try:
        return Ed25519PublicKey.from_public_bytes(base64.b64decode(text, validate=True))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not a base64 raw Ed25519 public key: {exc}") from None


def verify_signature(public: Ed25519PublicKey, message: bytes, signature_b64: str) -> bool:
    """Whether ``signature_b64`` is a valid signature of ``message`` under ``public``."""
    try:
        public.verify(base64.b64decode(signature_b64, validate=True), message)
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding of a payload (what a DSSE signature covers)."""
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(type_bytes), type_bytes, len(payload), payload)
