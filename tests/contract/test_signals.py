"""The signals shard format (decision_contract.signals): keys, rows and the refusals."""

from __future__ import annotations

import numpy as np
import pytest

from decision_contract import Decision
from decision_contract.signals import SHARD_SUFFIX, read_model_sha256, read_shard, request_key, write_shard

MODEL = "ab" * 32


def decision(**changes) -> Decision:
    fields = {"id": "d-1", "state": "The VPN drops every ten minutes.", "question": "Which queue?",
              "options": [{"id": "it", "description": "IT"}, {"id": "hr", "description": "HR"}]}
    return Decision(**{**fields, **changes})


def test_the_key_is_the_model_and_the_content_not_the_id_or_the_readout_options():
    key = request_key(MODEL, decision())
    assert len(key) == 64 and bytes.fromhex(key)
    assert request_key(MODEL, decision(id="other", temperature=2.0, return_hidden_state=True)) == key
    assert request_key("cd" * 32, decision()) != key
    assert request_key(MODEL, decision(state="Something else.")) != key
    assert request_key(MODEL, decision(question="Which team?")) != key


def test_rows_come_back_as_written(tmp_path):
    rng = np.random.default_rng(0)
    hidden = rng.normal(0, 3, size=(3, 8)).astype(np.float32)
    logits = [[1.5, -2.0], [0.25, 3.0, -1.0, 7.5], [9.0, 8.0, 7.0]]
    keys = [request_key(MODEL, decision(state=f"state {i}")) for i in range(3)]
    path = write_shard(tmp_path / f"part-00000{SHARD_SUFFIX}", MODEL, keys, hidden, logits, [0.9, 0.5, 0.125],
                       ["v2", "v1", "v2"])
    assert path.name == "part-00000.signals.npz" and not list(tmp_path.glob(".*"))  # no temporary left behind
    shard = read_shard(path)
    assert shard.model_sha256 == MODEL == read_model_sha256(path)
    assert len(shard) == 3 and shard.keys == keys
    for i in range(3):
        h, z, m, v = shard.row(i)
        # float16 keeps about three significant digits
        np.testing.assert_allclose(h, hidden[i], rtol=1e-3, atol=1e-3)
        assert z.tolist() == logits[i]
        assert m == pytest.approx([0.9, 0.5, 0.125][i], rel=1e-6)
        assert v == ["v2", "v1", "v2"][i]


def test_a_compressed_shard_reads_the_same(tmp_path):
    keys = [request_key(MODEL, decision())]
    plain = read_shard(write_shard(tmp_path / "a.signals.npz", MODEL, keys, np.ones((1, 4)), [[1.0, 2.0]], [1.0], ["v"]))
    packed = read_shard(write_shard(tmp_path / "b.signals.npz", MODEL, keys, np.ones((1, 4)), [[1.0, 2.0]], [1.0], ["v"],
                                    compress=True))
    assert packed.keys == plain.keys and packed.row(0)[1].tolist() == plain.row(0)[1].tolist()


def test_a_key_ending_in_zero_bytes_survives(tmp_path):
    # numpy's fixed-width bytes drop trailing NUL bytes; the reader pads them back
    keys = ["ab" * 30 + "0000", "00" * 32]
    path = write_shard(tmp_path / "z.signals.npz", MODEL, keys, np.zeros((2, 2)), [[0.0, 1.0], [1.0, 0.0]], [1.0, 1.0],
                       ["v", "v"])
    assert read_shard(path).keys == keys


def test_an_empty_shard_is_a_shard(tmp_path):
    shard = read_shard(write_shard(tmp_path / "e.signals.npz", MODEL, [], [], [], [], []))
    assert len(shard) == 0 and shard.model_sha256 == MODEL


def test_rows_of_different_lengths_are_refused(tmp_path):
    keys = [request_key(MODEL, decision())]
    with pytest.raises(ValueError, match="as many"):
        write_shard(tmp_path / "x.signals.npz", MODEL, keys, np.zeros((2, 2)), [[0.0, 1.0]], [1.0], ["v"])
    with pytest.raises(ValueError, match="as many"):
        write_shard(tmp_path / "x.signals.npz", MODEL, keys, np.zeros((1, 2)), [[0.0, 1.0]], [1.0, 0.5], ["v"])
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("content", [b"not a zip at all", b"", b"PK\x03\x04 a damaged zip"])
def test_a_file_that_is_not_a_shard_is_named_in_the_error(tmp_path, content):
    path = tmp_path / "bad.signals.npz"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="bad.signals.npz: not a signals shard"):
        read_shard(path)
    with pytest.raises(ValueError, match="bad.signals.npz: not a signals shard"):
        read_model_sha256(path)


def test_an_npz_without_the_shards_members_is_not_a_shard(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, something=np.arange(3))
    with pytest.raises(ValueError, match=r"other\.npz: not a signals shard"):
        read_shard(path)


def test_a_shards_keys_are_read_alone_and_match_the_keys_it_was_written_with(tmp_path):
    from decision_contract.signals import read_keys

    keys = ["ab" * 31 + "00", "cd" * 32]
    path = write_shard(tmp_path / "k.signals.npz", "a" * 64, keys, np.zeros((2, 3)), [[0.0, 1.0]] * 2, [0.5, 0.5], ["v", "v"])
    raw = read_keys(path)
    assert raw.dtype == np.dtype("S32")
    assert list(raw) == list(np.array([bytes.fromhex(k) for k in keys], dtype="S32"))
    with pytest.raises(ValueError, match="not a signals shard"):
        read_keys(tmp_path / "missing.signals.npz")
