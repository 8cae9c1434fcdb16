"""A weights file is read once: its tensors are views of the bytes that were hashed (``attnzoo.load`` holds the
weights once, not the file's bytes and a copy). The safetensors header is checked as safetensors checks it."""

from __future__ import annotations

import hashlib
import json
import struct

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from attnzoo.errors import WeightsError
from attnzoo.io.weights import read_weights


def _raw(tmp_path, header: dict, data: bytes):
    """A safetensors file written by hand (header as given), and its digest."""
    text = json.dumps(header).encode()
    path = tmp_path / "w.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def test_every_dtype_reads_as_safetensors_reads_it(tmp_path):
    tensors = {
        "f32": torch.randn(3, 4),
        "bf16": torch.randn(5).bfloat16(),
        "f16": torch.randn(2, 2).half(),
        "f64": torch.randn(3, dtype=torch.float64),
        "i64": torch.arange(4),
        "u8": torch.arange(3, dtype=torch.uint8),
        "mask": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5),
        "empty": torch.empty(0, 3),
    }
    path = tmp_path / "w.safetensors"
    save_file(tensors, path)
    got, _ = read_weights(path, sha256=hashlib.sha256(path.read_bytes()).hexdigest())
    want = load_file(path)
    assert got.keys() == want.keys()
    for key, tensor in want.items():
        assert got[key].dtype == tensor.dtype and got[key].shape == tensor.shape and torch.equal(got[key], tensor), key
    got["f32"].add_(1)  # a view of a writable buffer: a loaded model trains
    assert torch.equal(got["f32"], want["f32"] + 1)


def test_a_tensor_whose_bytes_are_not_aligned_to_its_type_is_read_too(tmp_path):
    values = np.array([1.5, -2.0], dtype="<f4")
    header = {
        "odd": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]},
        "x": {"dtype": "F32", "shape": [2], "data_offsets": [3, 11]},
    }
    path, digest = _raw(tmp_path, header, bytes([1, 0, 1]) + values.tobytes())
    got, _ = read_weights(path, sha256=digest)
    assert got["odd"].tolist() == [True, False, True] and got["x"].tolist() == [1.5, -2.0]


@pytest.mark.parametrize(
    ("entries", "data", "reason"),
    [
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, bytes(12), "tensors end at byte"),
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12), "spans bytes 4..12"),
        ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, bytes(8), "12 bytes from byte 0"),
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 16]}}, bytes(8), "tensors end at byte|spans"),
        ({"a": {"dtype": "Q7", "shape": [2], "data_offsets": [0, 8]}}, bytes(8), "dtype 'Q7'"),
        ({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, bytes(8), "not counts"),
        ({"a": {"dtype": "F32", "shape": [2]}}, bytes(8), "KeyError"),
        (
            {
                "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
            },
            bytes(12),
            "spans bytes 4..12",
        ),
    ],
    ids=[
        "trailing bytes",
        "a gap",
        "too few bytes",
        "past the end",
        "unknown dtype",
        "negative",
        "no offsets",
        "overlap",
    ],
)
def test_a_header_that_does_not_tile_its_data_is_refused(tmp_path, entries, data, reason):
    path, digest = _raw(tmp_path, entries, data)
    with pytest.raises(WeightsError, match=rf"cannot read it as safetensors .*({reason})"):
        read_weights(path, sha256=digest)
