"""Protocol: schema, canonical hashing, signing, registry, seed streams, links, decision engine."""

from creditaudit.protocol.canonical import canonical_bytes, canonical_hash, sha256_bytes, sha256_file
from creditaudit.protocol.decision import UNDETERMINED, Decision, GateResult, decide, decide_all
from creditaudit.protocol.diff import FieldChange, field_diff
from creditaudit.protocol.inputs import policy_pins
from creditaudit.protocol.io import default_template_text, load_protocol, parse_protocol, protocol_from_dict
from creditaudit.protocol.links import StageLink, read_link, verify_links
from creditaudit.protocol.lock import (
    FrozenProtocol,
    Lock,
    RegistryEntry,
    VerifyReport,
    amend,
    freeze,
    lock_path_for,
    read_lock,
    read_registry,
    registry_path_for,
    require_frozen,
    verify,
)
from creditaudit.protocol.schema import AUDIT_STATISTICS, PROTOCOL_VERSION, Protocol, identity_dict, protocol_id
from creditaudit.protocol.seeds import SeedStreams, rng, seed_int, seed_sequence, torch_generator
from creditaudit.protocol.signing import Signer, generate_keypair, load_public_key, load_signer

__all__ = [
    "AUDIT_STATISTICS",
    "PROTOCOL_VERSION",
    "UNDETERMINED",
    "Decision",
    "FieldChange",
    "FrozenProtocol",
    "GateResult",
    "Lock",
    "Protocol",
    "RegistryEntry",
    "SeedStreams",
    "Signer",
    "StageLink",
    "VerifyReport",
    "amend",
    "canonical_bytes",
    "canonical_hash",
    "decide",
    "decide_all",
    "default_template_text",
    "field_diff",
    "freeze",
    "generate_keypair",
    "identity_dict",
    "load_protocol",
    "load_public_key",
    "load_signer",
    "lock_path_for",
    "parse_protocol",
    "policy_pins",
    "protocol_from_dict",
    "protocol_id",
    "read_link",
    "read_lock",
    "read_registry",
    "registry_path_for",
    "require_frozen",
    "rng",
    "seed_int",
    "seed_sequence",
    "sha256_bytes",
    "sha256_file",
    "torch_generator",
    "verify",
    "verify_links",
]
