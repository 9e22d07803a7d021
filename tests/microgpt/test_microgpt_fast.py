"""The fast engine (persistent kernels) against the reference engine (one launch per C launch).

Both run the same device functions, each float with the same operations in the same order, so the
losses, every float of the three arenas, and the samples must be identical, not merely close. The
fast engine runs with its arenas staged in shared memory (as for the names corpus), and, for one
step, in global memory (as for vocabularies too large to stage): the phases are the same code, only
where the arenas live differs. Step 0's Adam schedule does not depend on the number of steps, so
the reference's state after its first step is what a one-step run must end with.
"""
import numpy as np
import pytest

from microgpt_numba import fast
from microgpt_numba.arena import KV_FIELDS, LAYER_CACHE_FIELDS, FloatArena, Model, Scratch, TrainCache, \
    model_param_shapes, param_storage_count, position_cache_fields, scratch_fields, scratch_storage_count, \
    train_cache_storage_count
from microgpt_numba.constants import BLOCK_SIZE
from microgpt_numba.dataset import load_dataset, tokenize_doc
from microgpt_numba.glibc_rand import GlibcRand
from microgpt_numba.model import StepValues, train_step
from microgpt_numba.sample import generate_samples

# After the shuffle the steps train on "c" (2 positions), then the 17-byte document (the block's 16
# positions, with tokens seen up to 6 times, so wte gradient rows sum over many positions), then
# "c" again (cache rows 2..15 keep the long document's values; grad_keys/grad_values rows are zero).
DOCS = [b"abcabcabcabcbbcaa", b"c"]
STEPS, SAMPLES, TEMPERATURE = 3, 1, np.float32(0.8)


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


def bits(arenas):
    return [a.base.copy_to_host().view(np.uint32) for a in arenas]


def test_table_columns_follow_the_arena_field_order():
    """fast.py names the offset-table columns by hand; each must be its field's place in arena.py."""
    layer_activation = {"FC1": "FC1_OUT", "FC2": "FC2_OUT"}  # not to be confused with the weights
    columns = {
        "param": [name.upper() for name, _, _ in model_param_shapes(1)[:3]],
        "layer param": [name.split("_", 1)[1].upper() for name, _, _ in model_param_shapes(1)[3:9]],
        "position": [name.upper() for name, _ in position_cache_fields(1)],
        "layer": [layer_activation.get(name.upper(), name.upper()) for name, _ in LAYER_CACHE_FIELDS],
        "kv": [name.upper() for name in KV_FIELDS],
        "scratch": [name.upper() for name, _ in scratch_fields(1)],
    }
    for kind, names in columns.items():
        assert [getattr(fast, name) for name in names] == list(range(len(names))), kind
    assert (fast.POS_FIELDS, fast.LC_FIELDS, fast.SCRATCH_FIELDS) == \
        (len(columns["position"]), len(columns["layer"]), len(columns["scratch"]))


@pytest.fixture(scope="module")
def reference():
    gen, dataset, arenas, model, cache, scratch = setup()
    sv, losses = StepValues(), []
    for step in range(STEPS):
        tokens = tokenize_doc(dataset, dataset.docs[step % len(dataset.docs)])
        n = min(len(tokens) - 1, BLOCK_SIZE)
        sv.set_step(tokens, step, STEPS)
        train_step(model, cache, scratch, dataset, sv, n)
        losses.append(sv.mean_loss(n))
        if step == 0:
            first_step = bits(arenas)
    trained = bits(arenas)
    out = Collect()
    generate_samples(model, cache, dataset, sv, SAMPLES, TEMPERATURE, gen, out)
    samples = [line.split(b": ", 1)[1] for line in out.data.split(b"\n") if line.startswith(b"sample")]
    return losses, first_step, trained, samples, bits(arenas)


def test_documents_cover_the_cases():
    _, dataset, _, _, _, _ = setup()
    assert dataset.docs == [b"c", b"abcabcabcabcbbcaa"] and STEPS == 3


def test_fast_engine_reproduces_reference_engine(reference):
    ref_losses, _, ref_trained, ref_samples, ref_sampled = reference
    gen, dataset, arenas, model, cache, scratch = setup()
    layout = fast.Layout(model, arenas[0], cache, arenas[1], scratch, arenas[2])
    assert fast.staged_bytes(*layout.arenas, layout.pos_scratch) > 0
    losses = fast.train(layout, dataset, STEPS)
    assert [x.view(np.uint32) for x in losses] == [x.view(np.uint32) for x in ref_losses]
    for ours, ref, name in zip(bits(arenas), ref_trained, ("params", "train cache", "scratch")):
        np.testing.assert_array_equal(ours, ref, err_msg=name)
    assert fast.generate(layout, dataset, SAMPLES, TEMPERATURE, gen) == ref_samples
    np.testing.assert_array_equal(bits(arenas)[1], ref_sampled[1], err_msg="train cache after sampling")


def test_fast_engine_with_arenas_in_global_memory(reference, monkeypatch):
    monkeypatch.setattr(fast, "stage_budget", lambda: 0)
    ref_losses, ref_first_step = reference[0], reference[1]
    _, dataset, arenas, model, cache, scratch = setup()
    layout = fast.Layout(model, arenas[0], cache, arenas[1], scratch, arenas[2])
    assert fast.staged_bytes(*layout.arenas, layout.pos_scratch) == 0
    losses = fast.train(layout, dataset, 1)
    assert losses[0].view(np.uint32) == ref_losses[0].view(np.uint32)
    for ours, ref, name in zip(bits(arenas), ref_first_step, ("params", "train cache", "scratch")):
        np.testing.assert_array_equal(ours, ref, err_msg=name)
