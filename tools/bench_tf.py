"""tools/bench.py's tf entry: timing the port on a GPU: forward, forward + backward at T=64
and 128 generated tokens, beside PyTorch eager fp32 GPT-2 on the same GPU, with the bits
checked against the oracle fixture, and the speed-up over tf.c's own timers where the fixture
recorded them (tools/tf_oracle.py, on the CPU that made it).

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
from tf_numba.checkpoints import c_hex
from tf_numba.forward import forward
from tf_numba.generate import GENERATE, generate, prompt_size
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
        with open(fixture) as fh:
            tf_c = json.load(fh).get("tf_c_seconds")
        if tf_c:  # tf.c on the CPU where the fixture was made (tools/tf_oracle.py)
            result["tf_c_seconds"] = tf_c
            result["speedup_vs_tf_c_forward"] = round(tf_c["forward"] / fwd)
            result["speedup_vs_tf_c_forward_backward"] = round((tf_c["forward"] + tf_c["backward"]) / fwd_bwd)
        prompt = [int(t) for t in data[:prompt_size(len(data), m.cfg.d_seq, GENERATE)]]
        generate(m, prompt, 2)  # compiles generation's own kernels (one-row unembedding, argmax)
        t = time.perf_counter()
        tokens = generate(m, prompt, GENERATE)
        result["generate_128_s"] = round(time.perf_counter() - t, 3)
        result["generate_first_tokens"] = tokens[:8]
    except Exception as exc:  # keep the numbers measured so far
        result["error"] = f"{type(exc).__name__}: {exc}"
    return result


def time_torch(T=64, repeats=20):
    """PyTorch eager fp32 GPT-2 124M (random weights from the config, no download), batch 1."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = GPT2LMHeadModel(GPT2Config()).cuda().float()
    x = torch.randint(0, 50257, (1, T), device="cuda")

    def fwd():
        with torch.no_grad():
            model(x)

    def fwd_bwd():
        model.zero_grad(set_to_none=False)
        model(x, labels=x).loss.backward()  # the model shifts the labels itself

    out = {"torch": torch.__version__}
    for name, fn in (("forward_ms", fwd), ("forward_backward_ms", fwd_bwd)):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(repeats):
            fn()
        torch.cuda.synchronize()
        out[name] = round((time.perf_counter() - t) / repeats * 1e3, 3)
    return out
