"""tools/bench.py's tf entry, our side: forward and forward + backward at T=64, with the bits
checked against the oracle fixture before and after the timed replays, the speed-up over tf.c's
own timers where the fixture recorded them (tools/tf_oracle.py, on the CPU that made it), and
greedy generation through the decoder and the full recompute (tools/bench_peers.py times
PyTorch beside it).

The training step is recorded as CUDA graphs and replayed (cudakit.stream); each timing is the
median of five means of `repeats` replays between device synchronisations, after one warm replay. The
eager numbers (kernels launched one by one from Python, no per-stage synchronisation) show what
the graphs save."""
import json
import statistics
import time

import numpy as np
from numba import cuda

from cudakit.stream import Recorded
from tf_numba import kernels as K
from tf_numba import launch
from tf_numba.checkpoints import c_hex
from tf_numba.forward import forward
from tf_numba.generate import generate
from tf_numba.training import fixture_expected, run_step, training_step
from tf_numba.validation import sequential_sum

H200_FP32_PEAK = 67e12  # FLOP/s, dense fp32 without tensor cores


def flops(cfg, T):
    """Multiply-adds x 2 of one forward pass at T tokens (causal attention: half the scores)."""
    D, L, V = cfg.d_model, cfg.n_layers, cfg.d_vocab
    per_layer = 2 * T * D * 12 * D + 2 * (T * (T + 1) // 2) * D * 2
    return L * per_layer + 2 * T * D * V


def persistent_sums(m, T):
    """The checkpoints whose arrays still hold their values after a whole training step
    (tf.c reuses activations_back across layers, and the embedding backward adds to wte)."""
    cfg, a, b, g = m.cfg, m.activations, m.activations_back, m.gradients
    D, V, top, last = cfg.d_model, cfg.d_vocab, g.h[cfg.n_layers - 1], f"h{cfg.n_layers - 1}"
    x = a.h[0]
    arrays = {
        "forward.embedding": (a.embedding.out, T * D), "forward.h0.ln_1": (x.ln_1.out, T * D),
        "forward.h0.attn.c_attn": (x.attn.c_attn.out, 3 * T * D), "forward.h0.attn.z": (x.attn.z.out, T * D),
        "forward.h0.attn.c_proj": (x.attn.c_proj.out, T * D), "forward.h0.ln_2": (x.ln_2.out, T * D),
        "forward.h0.mlp.c_proj": (x.mlp.c_proj.out, T * D), "forward.ln_f": (a.ln_f.out, T * D),
        "forward.unembedding": (a.unembedding.out, T * V), "backward.loss": (b.loss, 1),
        "backward.ln_f.out": (b.ln_f.out, T * D), "backward.ln_f.weight": (g.ln_f.weight, D),
        "backward.ln_f.bias": (g.ln_f.bias, D), "backward.wte": (g.wte.weight, V * D),
        "backward.wpe": (g.wpe.weight, T * D),
    }
    for name in ("mlp.c_proj", "mlp.c_fc", "attn.c_proj", "attn.c_attn"):
        group, layer = name.split(".")
        grads = getattr(getattr(top, group), layer)
        arrays[f"backward.{last}.{name}.weight"] = (grads.weight, grads.weight.size)
        arrays[f"backward.{last}.{name}.bias"] = (grads.bias, grads.bias.size)
    for name in ("ln_1", "ln_2"):
        arrays[f"backward.{last}.{name}.weight"] = (getattr(top, name).weight, D)
        arrays[f"backward.{last}.{name}.bias"] = (getattr(top, name).bias, D)
    return {label: sequential_sum(arr.reshape(-1)[:n].copy_to_host()) for label, (arr, n) in arrays.items()}


def arena_bits(m):
    """The gradients and activations_back arenas as raw bits (NaN-safe to compare)."""
    return [arena.raw.copy_to_host().view(np.uint32) for arena in (m.gradients, m.activations_back)]


def timed_replays(recorded, repeats, batches=5):
    """The median over `batches` of the mean time of `repeats` replays queued back to back, after
    a warm replay."""
    recorded()
    cuda.synchronize()
    means = []
    for _ in range(batches):
        t = time.perf_counter()
        for _ in range(repeats):
            recorded.launch()
        recorded.sync()
        means.append((time.perf_counter() - t) / repeats)
    return statistics.median(means)


def time_tf(m, data, fixture, repeats=20):
    """Our numbers at the fixture's input size; every checkpoint checked first (validation)."""
    T, fp_model, expected = fixture_expected(fixture, m.cfg)
    run_step(m, data, T)  # compiles the kernels
    validation = run_step(m, data, T)
    want = {label: s for label, _, s in expected}
    validated = sum(got == want[label] for label, _, got in validation.sums)

    def step():
        training_step(m, T)

    result = {"fp_model": fp_model, "input_size": T,
              "validate_checkpoints_match": f"{validated}/{len(expected)}",
              "validate_stage_ms": {name: {k: round(v * 1e3, 3) for k, v in stages.items()}
                                    for name, stages, _ in validation.timings}}
    f = flops(m.cfg, T)

    forward(m, T, last_only=False)  # eager: kernels launched one by one from Python
    cuda.synchronize()
    t = time.perf_counter()
    for _ in range(repeats):
        forward(m, T, last_only=False)
    cuda.synchronize()
    result["forward_eager_ms"] = round((time.perf_counter() - t) / repeats * 1e3, 3)

    try:
        fwd = timed_replays(Recorded(lambda: forward(m, T, last_only=False)), repeats)
        fwd_bwd = timed_replays(Recorded(step), repeats)
        after = persistent_sums(m, T)
        # Every gradient, not only the checkpoints: the recorded step (parameter gradients on
        # branches) against the same step launched in program order, which validation checked.
        replayed = arena_bits(m)
        step()
        cuda.synchronize()
        result["graph_arenas_equal_eager"] = all(np.array_equal(x, y) for x, y in zip(replayed, arena_bits(m)))
        graph_bits = {label: c_hex(s) == c_hex(want[label]) for label, s in after.items()}
        result.update({
            "after_graph_replays_match": f"{sum(graph_bits.values())}/{len(graph_bits)}",
            "after_graph_replays_mismatch": [k for k, ok in graph_bits.items() if not ok],
            "forward_ms": round(fwd * 1e3, 3), "forward_backward_ms": round(fwd_bwd * 1e3, 3),
            "forward_tflops": round(f / fwd / 1e12, 3),
            "forward_backward_tflops": round(3 * f / fwd_bwd / 1e12, 3),
            "fraction_of_fp32_peak_forward": round(f / fwd / H200_FP32_PEAK, 4),
            "fraction_of_fp32_peak_forward_backward": round(3 * f / fwd_bwd / H200_FP32_PEAK, 4),
        })
        # The logits alone (softmax=False), as PyTorch's forward ends: timed apart, then checked by
        # tf.c's softmax (its reference kernel) of the replayed logits against its checkpoint.
        fwd_logits = timed_replays(Recorded(lambda: forward(m, T, last_only=False, softmax=False)), repeats)
        launch.blocks(K.tf_unembedding_softmax_chain, T, K.SOFTMAX_THREADS, 0, m.activations.unembedding.out, m.rows(T))
        probs = sequential_sum(m.activations.unembedding.out.reshape(-1)[:T * m.cfg.d_vocab].copy_to_host())
        result["logits_replays_match"] = c_hex(probs) == c_hex(want["forward.unembedding"])
        result["forward_logits_ms"] = round(fwd_logits * 1e3, 3)
        with open(fixture) as fh:
            tf_c = json.load(fh).get("tf_c_seconds")
        if tf_c:  # tf.c on the CPU where the fixture was made (tools/tf_oracle.py)
            result["tf_c_seconds"] = tf_c
            result["speedup_vs_tf_c_forward"] = round(tf_c["forward"] / fwd)
            result["speedup_vs_tf_c_forward_backward"] = round((tf_c["forward"] + tf_c["backward"]) / fwd_bwd)
    except Exception as exc:  # keep the numbers measured so far
        result["error"] = f"{type(exc).__name__}: {exc}"
    return result


H200_BANDWIDTH = 4.8e12  # bytes/s, the datasheet's HBM3e rate


def decode_bytes(cfg):
    """What one decode step must read at least: every weight it multiplies by (the layers' four
    matrices and wte for the unembedding), once."""
    D, L = cfg.d_model, cfg.n_layers
    return 4 * (L * (D * 3 * D + D * D + 2 * D * 4 * D) + cfg.d_vocab * D)


def time_generation(m, prompt, n_tokens, oracle=None, repeats=3):
    """Greedy generation of n_tokens after prompt through the decoder (prefill included) and the
    full recompute, each the median wall time of `repeats` calls after two warm ones (the first
    compiles, the second records the graphs); the tokens checked against the oracle's when given,
    and the decoder's against the recompute's."""
    def timed(**kw):
        t = time.perf_counter()
        tokens = generate(m, prompt, n_tokens, **kw)
        return time.perf_counter() - t, tokens

    out = {"prompt": len(prompt), "tokens": n_tokens}
    for name, kw in (("decoder", {}), ("recompute", {"recompute": True})):
        first = [timed(**kw)[0] for _ in range(2)]
        runs = [timed(**kw) for _ in range(repeats)]
        seconds, tokens = statistics.median(t for t, _ in runs), runs[0][1]
        r = out[name] = {"s": round(seconds, 4), "first_calls_s": [round(t, 2) for t in first],
                         "tokens_per_s": round(n_tokens / seconds, 1)}
        r["same_tokens_every_call"] = all(t == tokens for _, t in runs)
        if oracle is not None:
            r["tokens_equal_oracle"] = tokens == oracle
        out.setdefault("token_lists", {})[name] = tokens
    out["decoder_tokens_equal_recompute"] = out["token_lists"]["decoder"] == out["token_lists"]["recompute"]
    del out["token_lists"]
    # The decode steps alone: the whole call less a prefill-only call, per token.
    t = time.perf_counter()
    generate(m, prompt, 1)
    prefill = time.perf_counter() - t
    per_token = (out["decoder"]["s"] - prefill) / (n_tokens - 1)
    floor = decode_bytes(m.cfg) / H200_BANDWIDTH
    out["decoder"].update({"prefill_s": round(prefill, 4), "decode_ms_per_token": round(per_token * 1e3, 4),
                           "weight_stream_floor_ms_per_token": round(floor * 1e3, 4),
                           "floor_fraction": round(floor / per_token, 3)})
    return out
