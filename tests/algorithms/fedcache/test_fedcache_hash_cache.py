"""FedCache's hash cache: a sample is hashed once, whichever run meets it first."""

import numpy as np
import torch

from edgefd.algorithms.fedcache import hash_function
from edgefd.algorithms.fedcache.encoders import HashEncoder, build_encoder
from edgefd.algorithms.fedcache.hash_cache import HashCache, encoder_key, sample_keys


def counting(encoder: HashEncoder) -> tuple[HashEncoder, list[int]]:
    """The encoder, counting how many samples it is asked to hash."""
    seen: list[int] = []

    def encode(x: torch.Tensor) -> np.ndarray:
        seen.append(len(x))
        return encoder.encode_batch(x)

    return HashEncoder(encoder.name, encode, encoder.batch_size), seen


def test_a_sample_is_hashed_once_across_runs_splits_and_orders(tmp_path):
    x = torch.randn(50, 1, 8, 8)
    reference = build_encoder("projection:16")(x)
    encoder, seen = counting(build_encoder("projection:16"))
    first = HashCache(encoder, tmp_path)(x[:30])
    assert sum(seen) == 30
    np.testing.assert_allclose(first, reference[:30], rtol=1e-5, atol=1e-6)  # BLAS rounding by batch
    # a later run with another split: 10 known samples in another order and 20 new ones
    order = torch.cat([torch.arange(29, 19, -1), torch.arange(30, 50)])
    again = HashCache(encoder, tmp_path)
    np.testing.assert_allclose(again(x[order]), reference[order.numpy()], rtol=1e-5, atol=1e-6)
    assert again.computed == 20 and sum(seen) == 50
    everything = HashCache(encoder, tmp_path)
    np.testing.assert_allclose(everything(x), reference, rtol=1e-5, atol=1e-6)
    assert everything.computed == 0 and sum(seen) == 50  # nothing hashed twice
    assert len(list((tmp_path / encoder_key(encoder)).glob("*.keys.npy"))) == 2  # one shard per run that hashed


def test_repeated_samples_in_one_call_are_stored_once(tmp_path):
    x = torch.randn(4, 1, 8, 8)
    twice = torch.cat([x, x[:2]])
    out = HashCache(build_encoder("projection:8"), tmp_path)(twice)
    np.testing.assert_allclose(out[4:], out[:2], rtol=1e-5, atol=1e-6)
    (keys_file,) = (tmp_path / encoder_key(build_encoder("projection:8"))).glob("*.keys.npy")
    assert len(np.load(keys_file)) == 4


def test_keys_depend_on_content_dtype_and_shape_only():
    x = torch.randn(3, 1, 4, 4)
    assert (sample_keys(x) == sample_keys(x.clone())).all()
    assert len(set(sample_keys(x).tolist())) == 3
    assert sample_keys(x.reshape(3, 4, 2, 2))[0] != sample_keys(x)[0]  # same bytes, another shape
    assert sample_keys(x.double())[0] != sample_keys(x)[0]


def test_each_encoder_has_its_own_folder_and_a_weights_file_is_keyed_by_content(tmp_path):
    assert encoder_key(build_encoder("projection:8")) != encoder_key(build_encoder("projection:16"))
    weights = tmp_path / "encoder.onnx"
    weights.write_bytes(b"one")
    named = HashEncoder(f"onnx:{weights}", lambda x: x.numpy())
    before = encoder_key(named)
    weights.write_bytes(b"two")
    assert encoder_key(named) != before  # the same path with other weights is another encoder


def test_fedcache_caches_the_costly_encoders_by_default_and_never_when_off(tmp_path):
    cheap = build_encoder("pixels")
    assert hash_function(cheap, "auto") is cheap
    assert hash_function(build_encoder("projection:8"), "off").name == "projection:8"
    assert isinstance(hash_function(build_encoder("mobilenet"), "auto"), HashCache)
    assert isinstance(hash_function(cheap, str(tmp_path)), HashCache)  # a folder: always
