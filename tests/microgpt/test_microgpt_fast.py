"""The fast engine (persistent kernels) against the reference engine (one launch per C launch).

Both run the same device functions in the same order per element, so the losses, every float of
the three arenas after training, and the samples must be identical, not merely close.
"""
import numpy as np

from microgpt_numba import fast
from microgpt_numba.arena import FloatArena, Model, Scratch, TrainCache, param_storage_count, \
    scratch_storage_count, train_cache_storage_count
from microgpt_numba.constants import BLOCK_SIZE
from microgpt_numba.dataset import load_dataset, tokenize_doc
from microgpt_numba.glibc_rand import GlibcRand
from microgpt_numba.model import adam_update_model, backward_sequence, forward_sequence
from microgpt_numba.sample import generate_samples

DOCS = [b"abba", b"cab", b"bcaab", b"ac"]
STEPS, SAMPLES, TEMPERATURE = 2, 1, np.float32(0.8)


class Collect:
    def __init__(self):
        self.data = b""

    def write(self, b):
        self.data += b

    def flush(self):
        pass


def setup():
    gen = GlibcRand(42)
    dataset = load_dataset(DOCS, gen)
    v = dataset.vocab_size
    arenas = [FloatArena(param_storage_count(v)), FloatArena(train_cache_storage_count(v)),
              FloatArena(scratch_storage_count(v))]
    model = Model(arenas[0], v, gen)
    return gen, dataset, arenas, model, TrainCache(arenas[1], v), Scratch(arenas[2], v)


def test_fast_engine_reproduces_reference_engine():
    gen, dataset, arenas, model, cache, scratch = setup()
    ref_losses = []
    for step in range(STEPS):
        tokens = tokenize_doc(dataset, dataset.docs[step % len(dataset.docs)])
        n = min(len(tokens) - 1, BLOCK_SIZE)
        ref_losses.append(forward_sequence(model, cache, dataset, tokens, n))
        backward_sequence(model, cache, scratch, dataset, n)
        adam_update_model(model, step, STEPS)
    ref_params = arenas[0].base.copy_to_host()
    out = Collect()
    generate_samples(model, cache, dataset, SAMPLES, TEMPERATURE, gen, out)
    ref_samples = [line.split(b": ", 1)[1] for line in out.data.split(b"\n") if line.startswith(b"sample")]

    gen, dataset, arenas, model, cache, scratch = setup()
    layout = fast.Layout(model, arenas[0], cache, arenas[1], scratch, arenas[2])
    losses = fast.train(layout, dataset, STEPS)
    assert [x.view(np.uint32) for x in losses] == [x.view(np.uint32) for x in ref_losses]
    np.testing.assert_array_equal(arenas[0].base.copy_to_host().view(np.uint32), ref_params.view(np.uint32))
    assert fast.generate(layout, dataset, SAMPLES, TEMPERATURE, gen) == ref_samples
