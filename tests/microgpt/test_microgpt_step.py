"""One training step of the reference engine (simulator) against the float64 numpy model.

Tolerances: the kernels run in float32 (24-bit mantissa) through ~10 dependent layers of
sums of up to 64 terms, so agreement to ~1e-5 relative is what float32 can give; a wrong
index, sign or missing term shows up as an O(1) relative error.
"""
import numpy as np
import pytest

from tests.microgpt import numpy_reference as ref
from microgpt_numba.arena import FloatArena, Model, Scratch, TrainCache, param_storage_count, \
    scratch_storage_count, train_cache_storage_count
from microgpt_numba.dataset import load_dataset, tokenize_doc, trained_positions
from microgpt_numba.glibc_rand import GlibcRand
from microgpt_numba.model import StepTable, StepValues, adam_update_model, backward_sequence, forward_sequence

DOCS = [b"abba", b"cab", b"bcaab", b"ac"]


def host_params(model, field):
    return {p.name: getattr(p, field).copy_to_host().reshape(p.rows, p.cols).astype(np.float64)
            for p in model.params()}


def build(docs, gen):
    dataset = load_dataset(docs, gen)
    v = dataset.vocab_size
    model = Model(FloatArena(param_storage_count(v)), v, gen)
    cache = TrainCache(FloatArena(train_cache_storage_count(v)), v)
    scratch = Scratch(FloatArena(scratch_storage_count(v)), v)
    return dataset, model, cache, scratch


@pytest.fixture(scope="module")
def step():
    dataset, model, cache, scratch = build(DOCS, GlibcRand(42))
    weights = host_params(model, "data")
    doc = max(dataset.docs, key=len)
    tokens = tokenize_doc(dataset, doc)
    n = trained_positions(len(tokens))
    sv = StepValues()
    sv.set_step(StepTable([tokens], 1), 0)
    forward_sequence(model, cache, dataset, sv, n)
    backward_sequence(model, cache, scratch, dataset, sv, n)
    return dict(model=model, weights=weights, tokens=tokens, n=n, loss=sv.mean_loss(n), sv=sv,
                grads=host_params(model, "grad"))


@pytest.mark.slow
def test_reference_gradient_matches_finite_differences(step):
    """The numpy reference's hand-written backward agrees with central differences."""
    w, tokens, n = step["weights"], step["tokens"], step["n"]
    _, grads = ref.loss_and_grads(w, tokens, n)
    rng = np.random.default_rng(0)
    for name in w:
        for flat in rng.choice(w[name].size, 3, replace=False):
            idx = np.unravel_index(flat, w[name].shape)
            plus, minus = {k: v.copy() for k, v in w.items()}, {k: v.copy() for k, v in w.items()}
            plus[name][idx] += 1e-6
            minus[name][idx] -= 1e-6
            fd = (ref.loss_and_grads(plus, tokens, n)[0] - ref.loss_and_grads(minus, tokens, n)[0]) / 2e-6
            assert fd == pytest.approx(grads[name][idx], rel=1e-5, abs=1e-8), (name, idx)


def test_loss_matches_float64(step):
    expected, _ = ref.loss_and_grads(step["weights"], step["tokens"], step["n"])
    assert step["n"] == 6
    assert float(step["loss"]) == pytest.approx(expected, rel=1e-5)


def test_every_gradient_matches_float64(step):
    _, expected = ref.loss_and_grads(step["weights"], step["tokens"], step["n"])
    for name, ours in step["grads"].items():
        scale = np.abs(expected[name]).max()
        assert scale > 0, name
        np.testing.assert_allclose(ours, expected[name], rtol=0, atol=2e-5 * scale, err_msg=name)


def test_adam_update_matches_float64(step):
    """adam_update_model at step 3 of 10 with non-zero moments; gradients are zeroed afterwards."""
    model, rng = step["model"], np.random.default_rng(1)
    before = {}
    for p in model.params():
        m0 = rng.normal(0, 0.01, p.count()).astype(np.float32)
        v0 = rng.uniform(0, 1e-4, p.count()).astype(np.float32)
        p.m.copy_to_device(m0)
        p.v.copy_to_device(v0)
        before[p.name] = (p.data.copy_to_host(), p.grad.copy_to_host(), m0, v0)
    step["sv"].set_step(StepTable([step["tokens"]] * 4, 10), 3)
    adam_update_model(model, step["sv"])
    for p in model.params():
        data, grad, m0, v0 = (x.astype(np.float64) for x in before[p.name])
        exp_data, exp_m, exp_v = ref.adam(data, grad, m0, v0, 3, 10)
        # float32 BETA1/BETA2 and their complements are off by ~1e-7 relative; where the two
        # terms of m cancel, that error is relative to the terms, not to the result.
        for ours, exp in ((p.m, exp_m), (p.v, exp_v)):
            np.testing.assert_allclose(ours.copy_to_host(), exp, rtol=1e-6, atol=1e-6 * np.abs(exp).max(),
                                       err_msg=p.name)
        # The step is lr_t * m_hat / sqrt(v_hat) ~ 1e-2; float32 data carries ~6e-8 relative error.
        np.testing.assert_allclose(p.data.copy_to_host(), exp_data, rtol=0, atol=1e-7, err_msg=p.name)
        assert not p.grad.copy_to_host().any(), p.name
