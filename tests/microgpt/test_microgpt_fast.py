"""The fast engine (persistent kernels) against the reference engine (one launch per C launch).

Both run the same device functions, each float with the same operations in the same order, so the
losses, every float of the three arenas, and the samples must be identical, not merely close. The
fast engine runs with its arenas staged in shared memory (as for the names corpus), and, for one
step, in global memory (as for vocabularies too large to stage): the phases are the same code, only
where the arenas live differs. Step 0's Adam schedule does not depend on the number of steps, so
the reference's state after its first step is what a one-step run must end with.
"""
import io

import numpy as np
import pytest
from numba import cuda

from microgpt_numba import fast
from microgpt_numba.arena import KV_FIELDS, LAYER_CACHE_FIELDS, FloatArena, Model, Scratch, TrainCache, \
    model_param_shapes, param_storage_count, position_cache_fields, scratch_fields, scratch_storage_count, \
    train_cache_storage_count
from microgpt_numba.dataset import load_dataset, tokenize_doc, trained_positions
from microgpt_numba.glibc_rand import GlibcRand
from microgpt_numba.kernels import NEG_HUGE, SOFTMAX_THREADS
from microgpt_numba.model import StepTable, StepValues, train_step
from microgpt_numba.sample import generate_samples

# After the shuffle the steps train on "c" (2 positions), then the 17-byte document (the block's 16
# positions, with tokens seen up to 6 times, so wte gradient rows sum over many positions), then
# "c" again (cache rows 2..15 keep the long document's values; grad_keys/grad_values rows are zero).
# A vocabulary of 5, not a power of two, leaves a softmax tree level partly live (live_tree).
DOCS = [b"abcdabcdabcabbdaa", b"c"]
STEPS, SAMPLES, TEMPERATURE = 3, 1, np.float32(0.8)



def setup(docs=DOCS):
    """A run's state after the C's set-up: glibc stream, dataset, the three arenas, the structs."""
    gen = GlibcRand(42)
    dataset = load_dataset(docs, gen)
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


@cuda.jit
def live_tree_kernel(rows, lives, take_max):
    for r in range(rows.shape[0]):
        fast.live_tree(rows[r], lives[r], take_max)


def full_tree(row, take_max):
    """scaled_softmax's tree over all SOFTMAX_THREADS lanes, as its threads run it."""
    row = row.copy()
    stride = SOFTMAX_THREADS // 2
    while stride:
        left, right = row[:stride], row[stride:2 * stride]
        row[:stride] = np.where(right > left, right, left) if take_max else left + right
        stride //= 2
    return row[0]


@pytest.mark.parametrize("take_max", [True, False], ids=["max", "sum"])
def test_live_tree_is_the_full_tree(take_max):
    """Lanes past the vocabulary hold the identity (-1e30 for the max; +0 for sums of expf values)."""
    vocab_sizes = [1, 2, 3, 5, 16, 17, 27, 31, 32, 33, 100, 255, 256, 300]
    rng = np.random.default_rng(0)
    rows = np.zeros((len(vocab_sizes), SOFTMAX_THREADS + 1), dtype=np.float32)
    identity = NEG_HUGE if take_max else np.float32(0)
    for r, v in enumerate(vocab_sizes):
        live = min(v, SOFTMAX_THREADS)
        rows[r, :] = identity
        rows[r, :live] = rng.normal(size=live) * 3 if take_max else rng.random(live)
        rows[r, :live:7] = identity if take_max else rows[r, :live:7]  # lanes whose max stayed at -1e30
    expected = [full_tree(row, take_max) for row in rows]
    lives = np.minimum(vocab_sizes, SOFTMAX_THREADS).astype(np.int32)
    d_rows = cuda.to_device(rows)
    live_tree_kernel[1, 1](d_rows, cuda.to_device(lives), take_max)
    assert d_rows.copy_to_host()[:, 0].view(np.uint32).tolist() == np.array(expected).view(np.uint32).tolist()


@pytest.fixture(scope="module")
def reference():
    gen, dataset, arenas, model, cache, scratch = setup()
    token_lists = [tokenize_doc(dataset, dataset.docs[step % len(dataset.docs)]) for step in range(STEPS)]
    sv, table, losses = StepValues(), StepTable(token_lists, STEPS), []
    for step, tokens in enumerate(token_lists):
        n = trained_positions(len(tokens))
        sv.set_step(table, step)
        train_step(model, cache, scratch, dataset, sv, n)
        losses.append(sv.mean_loss(n))
        if step == 0:
            first_step = bits(arenas)
    trained = bits(arenas)
    out = io.BytesIO()
    generate_samples(model, cache, dataset, sv, SAMPLES, TEMPERATURE, gen, out)
    samples = [line.split(b": ", 1)[1] for line in out.getvalue().split(b"\n") if line.startswith(b"sample")]
    return losses, first_step, trained, samples, bits(arenas)


def test_documents_cover_the_cases():
    _, dataset, _, _, _, _ = setup()
    assert dataset.docs == [b"c", b"abcdabcdabcabbdaa"] and dataset.vocab_size == 5 and STEPS == 3


@pytest.mark.slow
def test_fast_engine_reproduces_reference_engine(reference):
    ref_losses, _, ref_trained, ref_samples, ref_sampled = reference
    gen, dataset, arenas, model, cache, scratch = setup()
    layout = fast.Layout(model, arenas[0], cache, arenas[1], scratch, arenas[2])
    assert fast.staged_bytes(*layout.arenas, layout.pos_scratch) > 0
    losses = fast.train(layout, dataset, STEPS)
    assert [x.view(np.uint32) for x in losses] == [x.view(np.uint32) for x in ref_losses]
    for ours, ref, name in zip(bits(arenas), ref_trained, ("params", "train cache", "scratch")):
        np.testing.assert_array_equal(ours, ref, err_msg=name)
    assert fast.Generation(layout, dataset, SAMPLES, TEMPERATURE, gen).run() == ref_samples
    np.testing.assert_array_equal(bits(arenas)[1], ref_sampled[1], err_msg="train cache after sampling")


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.skipif(fast.LAUNCH_THREADS == fast.THREADS, reason="the engine runs THREADS already")
def test_fast_engine_at_the_gpu_block_size(reference, monkeypatch):
    """The simulator launches LAUNCH_THREADS; the GPU's THREADS give the same first step, every float."""
    monkeypatch.setattr(fast, "LAUNCH_THREADS", fast.THREADS)
    ref_losses, ref_first_step = reference[0], reference[1]
    _, dataset, arenas, model, cache, scratch = setup()
    layout = fast.Layout(model, arenas[0], cache, arenas[1], scratch, arenas[2])
    losses = fast.train(layout, dataset, 1)
    assert losses[0].view(np.uint32) == ref_losses[0].view(np.uint32)
    for ours, ref, name in zip(bits(arenas), ref_first_step, ("params", "train cache", "scratch")):
        np.testing.assert_array_equal(ours, ref, err_msg=name)
