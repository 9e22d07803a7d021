"""Sampling with a fixed stream: the draw picks the first id whose running sum reaches it."""
import io

import numpy as np
import pytest

from tests.microgpt import numpy_reference as ref
from microgpt_numba.arena import FloatArena, Model, TrainCache, param_storage_count, train_cache_storage_count
from microgpt_numba.dataset import load_dataset
from microgpt_numba.glibc_rand import GlibcRand
from microgpt_numba.model import StepValues
from microgpt_numba.sample import generate_samples, sample_from_probs
from tests.conftest import FIXTURES

FIXTURE = FIXTURES / "microgpt_glibc_rand.txt"


def fixture_uniforms():
    """rand_uniform() after srand(42), as printed by the C program."""
    return [float.fromhex(line.split()[1]) for line in FIXTURE.read_text().splitlines() if line.startswith("uniform ")]


def test_sample_from_probs_follows_the_stream():
    probs = np.array([0.1, 0.0, 0.25, 0.4, 0.25], dtype=np.float32)
    gen = GlibcRand(42)
    edges = np.cumsum(probs.astype(np.float64))
    for u in fixture_uniforms():
        expected = int(np.searchsorted(edges, u))  # first i with u <= edges[i]
        assert sample_from_probs(probs, len(probs), gen) == min(expected, len(probs) - 1)


def test_sample_from_probs_falls_back_to_last_id():
    class One:
        def rand(self):
            return 2**31 - 1  # rand_uniform() == 1.0f, above a running sum that stops short of 1

    assert sample_from_probs(np.array([0.25, 0.25, 0.25], dtype=np.float32), 3, One()) == 2



@pytest.mark.slow
def test_generate_samples_matches_float64_model():
    """Two samples from a fresh model at temperature 0.7, each token re-derived with numpy."""
    gen = GlibcRand(42)
    dataset = load_dataset([b"abba", b"cab", b"bcaab", b"ac"], gen)
    v = dataset.vocab_size
    model = Model(FloatArena(param_storage_count(v)), v, gen)
    cache = TrainCache(FloatArena(train_cache_storage_count(v)), v)
    weights = {p.name: p.data.copy_to_host().reshape(p.rows, p.cols).astype(np.float64) for p in model.params()}
    ref_gen = GlibcRand(42)
    for _ in range(len(dataset.docs) - 1 + 2 * model.total_params()):  # the shuffle's and the init's draws
        ref_gen.rand()
    out = io.BytesIO()
    generate_samples(model, cache, dataset, StepValues(), 2, np.float32(0.7), gen, out)

    expected = [b"", b"--- inference (new, hallucinated names) ---"]
    for sample_idx in range(2):
        context, sample = [dataset.bos_id], b""
        while len(context) <= 16:
            probs = ref.forward(weights, np.array(context), temperature=0.7)["probs"][-1]
            u = (ref_gen.rand() + 1.0) / 2.0**31
            token = min(int(np.searchsorted(np.cumsum(probs), u)), v - 1)
            if token == dataset.bos_id:
                break
            context.append(token)
            sample += bytes([dataset.id_to_char[token]])
        expected.append(b"sample %2d: %s" % (sample_idx + 1, sample))
    assert out.getvalue().split(b"\n")[:-1] == expected
    assert any(len(line) > len(b"sample  1: ") for line in expected[2:])
