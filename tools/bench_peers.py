"""Peers of tf_numba for tools/bench.py's tf entry, on the same GPU, weights and tokens: HF
transformers' GPT2LMHeadModel in fp32 at batch 1, and llm.c's train_gpt2_fp32.cu.

- forward (no grad; the logits, and apart the probabilities, softmax(logits), which is what tf.c's
  forward ends with) and forward + backward (mean cross-entropy of every position against the next
  token) at T tokens: eager, CUDA graph (torch.cuda.graph, warmed on a side stream), and
  torch.compile(mode="reduce-overhead"), with TF32 off; the CUDA graph also with TF32 on. The
  graphs take an explicit 4D causal mask, with which HF's attention needs no host sync. The
  forward + backward graph is the PyTorch docs' recipe: gradients set to None before capture, so
  backward writes them from the graph's pool with no zeroing (the fastest variant).
- generation: model.generate(max_new_tokens=N, min_new_tokens=N, greedy) with the dynamic cache
  (eager) and with cache_implementation="static", which HF compiles (reduce-overhead).

- llm.c (bench.py's time_llmc, which builds and runs it; parse_llmc here reads its lines): the copy in the shared peers folder (anchors/peers/llmc, with its
  llmc_bench.cu driver), row-guarded by the folder's patch_llmc_rowguard.py (its 128-row matmul
  tiles write past the outputs at B*T = 64), built with nvcc for sm_90 and run with TF32 off and on.
  The folder's to_llmc_bin.py writes llm.c's model and token files from the same safetensors and
  data. Its figures are llmc_bench's own (cudaEvents, medians of means, as below).

Timing: CUDA events, the median over `batches` of the mean of `per_batch` calls queued back to back
after `warmup` calls. Generation: wall time of whole calls, the median of `repeats` after the
warm (compiling) ones, whose time is reported too. GPU memory: torch's peak allocation.
"""
import re
import statistics
import time

import numpy as np


def load_model(safetensors_path, cfg):
    """GPT2LMHeadModel with the file's weights (HF names, Conv1D [in, out], lm_head tied to wte)."""
    import torch
    from safetensors.numpy import load_file
    from transformers import GPT2Config, GPT2LMHeadModel

    eot = cfg.d_vocab - 1
    config = GPT2Config(vocab_size=cfg.d_vocab, n_positions=cfg.d_seq, n_embd=cfg.d_model, n_layer=cfg.n_layers,
                        n_head=cfg.n_heads, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=eot,
                        eos_token_id=eot, pad_token_id=eot)
    model = GPT2LMHeadModel(config)
    state = {k: torch.from_numpy(v) for k, v in load_file(str(safetensors_path)).items()
             if not k.endswith(".attn.bias")}  # HF rebuilds the causal masks itself
    missing, unexpected = model.transformer.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith(".attn.bias")]
    if missing or unexpected:
        raise RuntimeError(f"the weights do not fit GPT2LMHeadModel: missing {missing[:3]}, "
                           f"unexpected {unexpected[:3]}")
    model.tie_weights()
    return model.float().cuda().eval()


def bench(fn, warmup=3, batches=5, per_batch=20):
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    means = []
    for _ in range(batches):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(per_batch):
            fn()
        end.record()
        end.synchronize()
        means.append(start.elapsed_time(end) / per_batch)
    return round(statistics.median(means), 3)


def graph_of(fn, before_capture=None):
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    if before_capture is not None:
        before_capture()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def set_tf32(on):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def training_calls(model, tokens, T):
    """(logits, loss): the model's logits on tokens[0:T], and the mean cross-entropy of every
    position against the next token, with an explicit 4D causal mask (no host sync)."""
    import torch
    import torch.nn.functional as F

    x = torch.from_numpy(np.asarray(tokens[:T + 1], dtype=np.int64)).cuda()
    inp, tgt = x[:-1].view(1, T), x[1:].view(1, T)
    mask = torch.ones(T, T, dtype=torch.bool, device="cuda").tril().view(1, 1, T, T)

    def logits():
        return model(input_ids=inp, attention_mask=mask, use_cache=False).logits

    def loss():
        return F.cross_entropy(logits().view(-1, model.config.vocab_size), tgt.view(-1))

    return logits, loss


def time_training(model, tokens, T, parts):
    """{variant: {"forward_ms", "forward_probs_ms", "forward_backward_ms"}} for the parts asked ("eager", "graph",
    "compile"), each variant in its own try so one failing keeps the others."""
    import torch

    logits, loss = training_calls(model, tokens, T)

    def forward():
        with torch.no_grad():
            return logits()

    def forward_probs():  # what tf.c's forward ends with: the probabilities, not the logits
        with torch.no_grad():
            return logits().softmax(dim=-1)

    def loss_backward():
        loss().backward()

    def forward_backward():
        model.zero_grad(set_to_none=False)
        loss_backward()

    out = {}
    variants = []
    if "eager" in parts:
        variants.append(("eager, TF32 off", False,
                         lambda: (bench(forward), bench(forward_probs), bench(forward_backward))))
    if "graph" in parts:
        def graphs():
            f, fp = graph_of(forward), graph_of(forward_probs)
            fwd, fwd_probs = bench(f.replay), bench(fp.replay)
            fb = graph_of(lambda: loss_backward(), before_capture=lambda: model.zero_grad(set_to_none=True))
            return fwd, fwd_probs, bench(fb.replay)
        variants += [("CUDA graph, TF32 off", False, graphs), ("CUDA graph, TF32 on", True, graphs)]
    if "compile" in parts:
        def compiled():
            # As the shared peers' torch_anchor.py does (its 1.18 / 5.22 ms of 2026-11-30): the loss
            # compiled with the model, a forward compiled apart, the gradients allocated before (the
            # backward adds into them, outside the CUDA graphs' pool, so zeroing them touches no graph
            # output), and each call a new graph step (reduce-overhead's replays reuse their outputs).
            mode = "reduce-overhead"
            step = torch.compiler.cudagraph_mark_step_begin
            cfwd, closs = torch.compile(logits, mode=mode), torch.compile(loss, mode=mode)
            cprobs = torch.compile(lambda: logits().softmax(dim=-1), mode=mode)
            for p in model.parameters():
                p.grad = torch.zeros_like(p)

            def fwd():
                step()
                with torch.no_grad():
                    return cfwd()

            def fwd_probs():
                step()
                with torch.no_grad():
                    return cprobs()

            def fwd_bwd():
                step()
                model.zero_grad(set_to_none=False)
                closs().backward()

            return bench(fwd, warmup=5), bench(fwd_probs, warmup=5), bench(fwd_bwd, warmup=5)
        variants.append(("torch.compile reduce-overhead, TF32 off", False, compiled))
    for name, tf32, run in variants:
        set_tf32(tf32)
        torch.cuda.reset_peak_memory_stats()
        try:
            fwd, fwd_probs, fb = run()
            out[name] = {"forward_ms": fwd, "forward_probs_ms": fwd_probs, "forward_backward_ms": fb,
                         "peak_gpu_memory_mib": round(torch.cuda.max_memory_allocated() / 2**20)}
        except Exception as exc:  # torch.compile needs a working Triton, for one
            out[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        model.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
    set_tf32(False)
    return out


def time_generate(model, prompt, n_tokens, repeats=3):
    """{cache: {"s", "first_call_s", "tokens"}}: HF greedy generate, dynamic and static cache."""
    import torch

    inp = torch.tensor([prompt], dtype=torch.int64, device="cuda")
    out = {}
    for name, extra, warm in (("HF generate, dynamic cache", {}, 1),
                              ("HF generate, static cache, compiled", {"cache_implementation": "static"}, 2)):
        def call():
            torch.cuda.synchronize()
            t = time.perf_counter()
            with torch.no_grad():
                seq = model.generate(inp, attention_mask=torch.ones_like(inp), max_new_tokens=n_tokens,
                                     min_new_tokens=n_tokens, do_sample=False, use_cache=True, **extra)
            torch.cuda.synchronize()
            return time.perf_counter() - t, seq[0, len(prompt):].tolist()
        try:
            first = [call()[0] for _ in range(warm)]
            runs = [call() for _ in range(repeats)]
            out[name] = {"s": round(statistics.median(t for t, _ in runs), 4),
                         "first_calls_s": [round(t, 2) for t in first], "tokens": len(runs[0][1])}
        except Exception as exc:
            out[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return out



LLMC_LINE = re.compile(r"tf32=(on|off) (forward \(logits\)|fwd\+bwd \(forward\+loss, zero_grad, backward\)) "
                       r"ms: ([0-9.]+)")


def parse_llmc(stdout):
    """{"llm.c fp32 (row-guarded), TF32 off|on": {"forward_ms", "forward_backward_ms"}} from llmc_bench's lines."""
    out = {}
    for tf32, what, ms in LLMC_LINE.findall(stdout):
        key = "forward_ms" if what.startswith("forward") else "forward_backward_ms"
        out.setdefault(f"llm.c fp32 (row-guarded), TF32 {tf32}", {})[key] = float(ms)
    return out
