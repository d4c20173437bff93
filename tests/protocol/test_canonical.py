import hashlib
import json
import math

import numpy as np
import pytest

from creditaudit.protocol.canonical import canonical_bytes, canonical_hash, sha256_file, to_json_value


def test_rfc8785_key_order_and_separators():
    # RFC 8785 sorts keys by UTF-16 code units and removes whitespace.
    assert canonical_bytes({"b": [1, 2], "a": {"d": None, "c": True}}) == b'{"a":{"c":true,"d":null},"b":[1,2]}'


def test_rfc8785_number_format_matches_the_rfc_examples():
    # RFC 8785 §3.2.2.3 / ECMAScript Number.prototype.toString examples.
    assert canonical_bytes([1.0, 1e21, 1e-7, 0.000001, -0.0, 333333333.3333333]) == (
        b"[1,1e+21,1e-7,0.000001,0,333333333.3333333]"
    )


def test_keys_sort_by_utf16_code_units_as_in_rfc8785():
    # RFC 8785 §3.2.3's sorting example: U+FB33 sorts after U+1F600, whose UTF-16 surrogates
    # (0xD83D 0xDE00) are smaller although its code point is larger.
    keys = ["\u20ac", "\r", "\ufb33", "1", "\U0001f600", "\u0080", "\u00f6"]
    text = canonical_bytes({k: 0 for k in keys}).decode("utf-8")
    order = sorted(keys, key=lambda k: text.index(json.dumps(k, ensure_ascii=False)))
    assert order == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, np.float64("nan")])
def test_non_finite_numbers_are_errors(bad):
    with pytest.raises(TypeError, match="NaN/inf"):
        canonical_bytes({"x": [1, bad]})


def test_unknown_types_are_errors_with_path():
    with pytest.raises(TypeError, match=r"\$\.a\[1\]: value of type set"):
        canonical_bytes({"a": [1, {2}]})
    with pytest.raises(TypeError, match="key 1 is not a string"):
        canonical_bytes({1: "x"})


def test_numpy_scalars_are_converted_explicitly():
    assert to_json_value({"i": np.int64(3), "f": np.float32(0.5), "b": np.bool_(True)}) == {"i": 3, "f": 0.5, "b": True}


def test_hash_is_sha256_of_canonical_bytes(tmp_path):
    obj = {"z": 1, "a": "x"}
    assert canonical_hash(obj) == hashlib.sha256(b'{"a":"x","z":1}').hexdigest()
    path = tmp_path / "f.bin"
    path.write_bytes(b"abc")
    assert sha256_file(path) == hashlib.sha256(b"abc").hexdigest()


def test_canonical_round_trips_through_json():
    obj = {"k": [0.1, 2, "s", None, {"n": -5}]}
    assert json.loads(canonical_bytes(obj)) == obj
