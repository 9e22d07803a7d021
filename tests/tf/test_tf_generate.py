"""Generation: tf.c's greedy tokens (the oracle's, tf.c built with tf_validation 0) through both
paths, the full recompute and the KV-cache decoder; the two paths token for token on long
prompts; and the sampler."""
import json
import warnings

import numpy as np
import pytest

from tests.conftest import FIXTURES
from tf_numba import assets
from tf_numba.cli import main
from tf_numba.forward import forward
from tf_numba.generate import Sampler, generate
from tf_numba.model import TFModel

ORACLE = json.loads((FIXTURES / "tf_oracle_tiny_generate.json").read_text())
# The simulator costs about 0.4 s per token of context and pass; two tokens prove the loop
# (greedy tokens depend only on the prefix) and a decode step; the GPU runs all 24.
CPU_TOKENS = 2
PATHS = [pytest.param(True, id="recompute"), pytest.param(False, id="decoder")]


def tiny_model(tiny_assets, fp_model=ORACLE["fp_model"]):
    cfg, tensors = assets.load_model(tiny_assets / "model.safetensors")
    data = assets.load_data(tiny_assets / "data", cfg.d_vocab)
    return TFModel(cfg, tensors, fp_model), data


@pytest.mark.slow
@pytest.mark.parametrize("recompute", PATHS)
def test_generate_tiny_prefix(tiny_assets, recompute):
    """Both paths against tf.c's tokens: a prefill, then a decode step or a second full pass (the
    decoder's rows are also held to the full pass's below; a GPU runs all 24 tokens)."""
    m, data = tiny_model(tiny_assets)
    assert [int(t) for t in data[: len(ORACLE["prompt"])]] == ORACLE["prompt"]
    assert generate(m, ORACLE["prompt"], CPU_TOKENS, recompute=recompute) == ORACLE["tokens"][:CPU_TOKENS]


def rows_of_every_layer(m, n, unembedded):
    """Rows [0, n) of every activation a forward pass writes (attention: keys <= query), and the
    `unembedded` rows (logits), as bits."""
    a, S = m.activations, m.cfg.d_seq
    out = {}
    for name, view in [("embedding", a.embedding.out), ("ln_f.out", a.ln_f.out), ("ln_f.mean", a.ln_f.mean),
                       ("ln_f.r_std", a.ln_f.r_std)] + \
            [(f"h{i}.{k}", getattr(getattr(x, k.split(".")[0]), k.split(".")[1]) if "." in k else getattr(x, k).out)
             for i, x in enumerate(a.h) for k in ("ln_1.out", "ln_1.mean", "ln_1.r_std", "attn.c_attn", "attn.z",
                                                  "attn.c_proj", "res_1", "ln_2.out", "ln_2.mean", "ln_2.r_std",
                                                  "mlp.c_fc", "mlp.gelu", "mlp.c_proj", "res_2")]:
        out[name] = (view.out if hasattr(view, "out") else view).copy_to_host()[:n].view(np.uint32)
    for i, x in enumerate(a.h):
        scores = x.attn.softmax.out.copy_to_host()
        out[f"h{i}.attn.softmax"] = np.concatenate([scores[:, q, :q + 1].reshape(-1) for q in range(n)]).view(np.uint32)
    out["unembedding"] = a.unembedding.out.copy_to_host()[unembedded].view(np.uint32)
    assert S >= n
    return out


def check_decoder_rows(m, fresh, prompt, steps):
    """After a prefill and `steps` - 1 decode steps, every row the decoder wrote equals the full
    training forward pass's over the same tokens (tf.c's whole pass), bit for bit. Greedy, the
    decoder leaves logits (tf_argmax_logits needs no softmax), so the full pass stops there too."""
    tokens = generate(m, prompt, steps)
    n = len(prompt) + steps - 1  # rows computed: the prompt's, then one per decode step
    got = rows_of_every_layer(m, n, list(range(len(prompt) - 1, n)))
    fresh.set_tokens(prompt + tokens[:-1])
    forward(fresh, n, last_only=False, softmax=False)
    want = rows_of_every_layer(fresh, n, list(range(len(prompt) - 1, n)))
    assert [k for k in want if not np.array_equal(got[k], want[k])] == []


@pytest.mark.slow
def test_decoder_rows_are_the_full_pass_rows_tiny(tiny_assets):
    (m, _), (fresh, _) = tiny_model(tiny_assets), tiny_model(tiny_assets)
    check_decoder_rows(m, fresh, ORACLE["prompt"][:5], 2)


@pytest.mark.gpu
@pytest.mark.parametrize("recompute", PATHS)
def test_generate_tiny_all(tiny_assets, capsysbinary, recompute):
    """The CLI streams the prompt and the oracle's 24 tokens through enc."""
    enc = assets.load_enc(tiny_assets / "enc", 96)
    argv = ["--assets", str(tiny_assets), "--tokens", str(ORACLE["generate"])] + (["--recompute"] if recompute else [])
    assert main(argv) == 0
    want = b"".join(enc[t] for t in ORACLE["prompt"] + ORACLE["tokens"]) + b"\n"
    assert capsysbinary.readouterr().out == want


@pytest.fixture(scope="module")
def gpt2_assets(tmp_path_factory):
    from tf_assets import write_synthetic

    from tf_numba.config import GPT2

    out = tmp_path_factory.mktemp("tf_gpt2_gen")
    write_synthetic(out, GPT2)
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("recompute", PATHS)
@pytest.mark.parametrize("fp_model", ["fma", "nofma"])
def test_generate_gpt2_128(gpt2_assets, fp_model, recompute):
    """GPT-2 124M-shaped synthetic weights: the oracle's 128 greedy tokens after 64, both paths,
    the second time from recorded graphs."""
    oracle = json.loads((FIXTURES / f"tf_oracle_gpt2_generate_{fp_model}.json").read_text())
    cfg, tensors = assets.load_model(gpt2_assets / "model.safetensors")
    m = TFModel(cfg, tensors, fp_model)
    for _ in range(2):  # eager passes, then recorded and replayed
        assert generate(m, oracle["prompt"], oracle["generate"], recompute=recompute) == oracle["tokens"]


@pytest.mark.gpu
@pytest.mark.parametrize("fp_model", ["fma", "nofma"])
def test_decoder_rows_are_the_full_pass_rows_gpt2(gpt2_assets, fp_model):
    cfg, tensors = assets.load_model(gpt2_assets / "model.safetensors")
    m, fresh = TFModel(cfg, tensors, fp_model), TFModel(cfg, tensors, fp_model)
    prompt = [int(t) for t in np.random.default_rng(2).integers(0, cfg.d_vocab, 40)]
    check_decoder_rows(m, fresh, prompt, 24)


@pytest.mark.gpu
@pytest.mark.parametrize("fp_model", ["fma", "nofma"])
def test_decoder_equals_recompute_up_to_d_seq(gpt2_assets, fp_model):
    """A prompt of d_seq - 16 tokens and 16 more: the decoder's tokens are the full recompute's."""
    cfg, tensors = assets.load_model(gpt2_assets / "model.safetensors")
    m = TFModel(cfg, tensors, fp_model)
    prompt = [int(t) for t in np.random.default_rng(1).integers(0, cfg.d_vocab, cfg.d_seq - 16)]
    assert generate(m, prompt, 16) == generate(m, prompt, 16, recompute=True)


def argmax_rows():
    """Rows of logits where the softmax's first maximum is not the logits' first maximum, or only
    just is: equal maxima, maxima a few ulps apart near 0 (their exps are both 1.0f, so their
    probabilities tie and the first wins), a value one ulp under the max before it, and plain rows."""
    rng = np.random.default_rng(5)
    V = 97
    out = [rng.standard_normal(V, dtype=np.float32) * np.float32(s) for s in (1, 8, 40)]
    ties = rng.standard_normal(V, dtype=np.float32)
    ties[[70, 12]] = 9.0  # two equal maxima: the first
    out.append(ties)
    near_zero = np.full(V, -3.0, dtype=np.float32)
    near_zero[[20, 60]] = [1e-9, 2e-9]  # the logits' max is at 60; expf(-1e-9) is 1.0f: tf.c takes 20
    out.append(near_zero)
    below = rng.standard_normal(V, dtype=np.float32)
    below[50] = 30.0
    below[10] = np.nextafter(np.float32(30.0), np.float32(0.0))  # one ulp under, before: not a maximum
    out.append(below)
    small = np.zeros(V, dtype=np.float32)
    small[[3, 90]] = [np.float32(2.0 ** -25), np.float32(2.0 ** -24)]  # expf(-2^-25) rounds up to 1.0f: 3
    out.append(small)
    return np.stack(out)


@pytest.mark.parametrize("row", range(len(argmax_rows())))
def test_argmax_logits_is_the_softmax_argmax(row):
    """tf_argmax_logits on the logits gives the unembedding softmax + tf_argmax's token (generation's
    faithful pair), on rows built to tell them apart."""
    from numba import cuda

    from tf_numba import kernels as K
    from tf_numba import launch

    logits = argmax_rows()
    tokens = {}
    for kernel in ("faithful", "fast"):
        out = cuda.to_device(logits)
        rows = cuda.to_device(np.array([row, row + 1], dtype=np.int64))
        made = cuda.to_device(np.zeros(len(logits) + 1, dtype=np.uint16))
        if kernel == "faithful":
            launch.blocks(K.tf_unembedding_softmax_chain, 1, K.SOFTMAX_THREADS, 0, out, rows)
            launch.blocks(K.tf_argmax, 1, K.ARGMAX_THREADS, 0, out, rows, made)
        else:
            launch.blocks(K.tf_argmax_logits, 1, K.ARGMAX_THREADS, 0, out, rows, made)
        tokens[kernel] = (int(made.copy_to_host()[row + 1]), rows.copy_to_host().tolist())
    assert tokens["fast"] == tokens["faithful"]
    assert tokens["fast"][1] == [row + 1, row + 2]


def test_argmax_rows_tell_logits_from_probabilities():
    """In two rows tf.c's token (20, 3: the first of two probabilities that tie) is not the logits'
    argmax, so a kernel that took the logits' first maximum would fail the test above."""
    logits = argmax_rows()
    assert [int(np.argmax(logits[4])), int(np.argmax(logits[6]))] == [60, 90]
    for row, token in ((4, 20), (6, 3)):
        e = np.exp((logits[row] - logits[row].max()).astype(np.float64)).astype(np.float32)
        assert e[token] == e.max() == 1.0


@pytest.mark.slow
def test_top_k_1_is_greedy(tiny_assets):
    """The sampling path (probabilities to the host, the token back) with one token kept is tf.c's
    (one token in the simulator; a GPU runs sampled decode steps in test_sampler_same_seed_same_tokens)."""
    m, _ = tiny_model(tiny_assets)
    assert generate(m, ORACLE["prompt"], 1, sampler=Sampler(0.8, top_k=1, seed=3)) == ORACLE["tokens"][:1]


@pytest.mark.gpu
def test_sampler_same_seed_same_tokens(gpt2_assets):
    cfg, tensors = assets.load_model(gpt2_assets / "model.safetensors")
    m = TFModel(cfg, tensors, "fma")
    prompt = [int(t) for t in assets.load_data(gpt2_assets / "data", cfg.d_vocab)[:64]]
    runs = [generate(m, prompt, 32, sampler=Sampler(1.5, top_k=50, seed=7)) for _ in range(2)]
    assert runs[0] == runs[1] != generate(m, prompt, 32, sampler=Sampler(1.5, top_k=50, seed=8))


def test_sampler_same_seed_same_draws():
    rows = np.random.default_rng(0).dirichlet(np.ones(40), size=20).astype(np.float32)
    picks = [[sampler.pick(p) for p in rows] for sampler in (Sampler(0.7, 5, seed=4), Sampler(0.7, 5, seed=4))]
    assert picks[0] == picks[1]


def test_sampler_distribution_is_temperature_then_top_k():
    """The documented order: probabilities raised to 1/T, the K largest kept (ties: lower id),
    normalised; equal probabilities tie-break to the lower id."""
    p = np.array([0.1, 0.3, 0.05, 0.3, 0.25], dtype=np.float32)
    ids, q = Sampler(0.5, top_k=3).distribution(p)
    assert ids.tolist() == [1, 3, 4]
    want = p[[1, 3, 4]].astype(np.float64) ** 2
    assert np.allclose(q, want / want.sum(), rtol=1e-12)
    ids, _ = Sampler(2.0, top_k=1).distribution(p)
    assert ids.tolist() == [1]  # of the two maxima, the first: tf.c's argmax


def test_sampler_tiny_temperature_is_the_limit_without_a_warning():
    """Below about 1e-308, (log p - max) / T overflows to -inf: exp gives 0 for all but the maxima."""
    p = np.array([0.1, 0.3, 0.05, 0.3, 0.25], dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ids, q = Sampler(1e-310).distribution(p)
    assert q.tolist() == [0.0, 0.5, 0.0, 0.5, 0.0]


def test_sampler_draws_follow_the_documented_inverse_cdf():
    p = np.array([0.5, 0.25, 0.25], dtype=np.float32)
    rng = np.random.Generator(np.random.PCG64(11))
    u = [rng.random() for _ in range(50)]
    sampler = Sampler(1.0, seed=11)
    assert [sampler.pick(p) for _ in range(50)] == [0 if x < 0.5 else 1 if x < 0.75 else 2 for x in u]


@pytest.mark.gpu
def test_generation_prints_no_warning(tiny_assets):
    """On a GPU, nothing reaches stderr: no Numba advice about one-block grids, no other library's."""
    import os
    import subprocess
    import sys

    from tests.conftest import PYTHONPATH

    result = subprocess.run([sys.executable, "-m", "tf_numba", "--assets", str(tiny_assets), "--tokens", "4"],
                            capture_output=True, text=True, timeout=180, env={**os.environ, "PYTHONPATH": PYTHONPATH})
    assert result.returncode == 0 and "Warning" not in result.stderr, result.stderr
