"""tf_process's forward half: embedding, n_layers blocks, ln_f, unembedding with softmax."""
from . import kernels as K
from . import launch
from .validation import NO_VALIDATION


def forward(m, T, last_only, validation=NO_VALIDATION, rows=None, softmax=True, probs_copy=None):
    """The forward pass over tokens[0:T]. Training unembeds every row, as tf.c does; generation
    (last_only) unembeds only the row in m.last_rows, which lives on the device so a recorded
    pass can serve several lengths: rows past the current length are computed too, harmlessly,
    since no row reads a later one (attention is causal).

    With `rows` (m.last_rows: one row, which the device advances) the pass computes that row
    only, in every layer: the decode step. Every earlier row is in the activations arena from
    the passes before, and each of the row's sums runs in the order the full pass runs it, so
    its bits are the full pass's; T then only bounds the keys attention may read. softmax=False
    leaves the unembedded row as logits (greedy generation's argmax reads them). `probs_copy`
    (training: the backward's dL/dlogits) gets a copy of the probabilities as the softmax writes
    them."""
    cfg, p, a, fused = m.cfg, m.parameters, m.activations, m.fused
    D, V, d_k = cfg.d_model, cfg.d_vocab, cfg.d_k
    rows, n = (m.rows(T), T) if rows is None else (rows, 1)
    validation.start()

    launch.elementwise(K.tf_embedding, n * D, p.wte.weight, p.wpe.weight, m.tokens, a.embedding.out, rows, n)
    validation.time("embedding")
    validation.sum("forward.embedding", a.embedding.out, T * D)

    for layer_i in range(cfg.n_layers):
        w, x = p.h[layer_i], a.h[layer_i]
        first = layer_i == 0
        layer_in = a.embedding.out if first else a.h[layer_i - 1].res_2.out

        launch.ln(w.ln_1.weight, w.ln_1.bias, layer_in, x.ln_1.r_std, x.ln_1.mean, x.ln_1.out, rows, n, fused)
        validation.time("ln_1")
        if first:
            validation.sum("forward.h0.ln_1", x.ln_1.out, T * D)

        launch.matmul("tf_fc", x.ln_1.out, w.attn.c_attn.weight, w.attn.c_attn.bias, x.attn.c_attn.out, rows, n, fused)
        validation.time("attn.c_attn")
        if first:
            validation.sum("forward.h0.attn.c_attn", x.attn.c_attn.out, T * 3 * D)

        launch.attn(x.attn.c_attn.out, x.attn.softmax.out, x.attn.z.out, rows, n, T, d_k, m.rsqrt_d_k, fused)
        validation.time("attn.z")
        if first:
            validation.sum("forward.h0.attn.z", x.attn.z.out, T * D)

        # each product's next statement (tf_add, tf_gelu) runs as its epilogue (launch.matmul)
        launch.matmul("tf_fc", x.attn.z.out, w.attn.c_proj.weight, w.attn.c_proj.bias, x.attn.c_proj.out, rows, n,
                      fused, epilogue="add", res=layer_in, extra=x.res_1.out)
        validation.time("attn.c_proj")
        if first:
            validation.sum("forward.h0.attn.c_proj", x.attn.c_proj.out, T * D)
        validation.time("res_1")

        launch.ln(w.ln_2.weight, w.ln_2.bias, x.res_1.out, x.ln_2.r_std, x.ln_2.mean, x.ln_2.out, rows, n, fused)
        validation.time("ln_2")
        if first:
            validation.sum("forward.h0.ln_2", x.ln_2.out, T * D)

        launch.matmul("tf_fc", x.ln_2.out, w.mlp.c_fc.weight, w.mlp.c_fc.bias, x.mlp.c_fc.out, rows, n, fused,
                      epilogue="gelu", extra=x.mlp.gelu.out)
        validation.time("mlp.c_fc")
        validation.time("mlp.gelu")

        launch.matmul("tf_fc", x.mlp.gelu.out, w.mlp.c_proj.weight, w.mlp.c_proj.bias, x.mlp.c_proj.out, rows, n,
                      fused, epilogue="add", res=x.res_1.out, extra=x.res_2.out)
        validation.time("mlp.c_proj")
        if first:
            validation.sum("forward.h0.mlp.c_proj", x.mlp.c_proj.out, T * D)
        validation.time("res_2")

    last = a.h[cfg.n_layers - 1].res_2.out
    launch.ln(p.ln_f.weight, p.ln_f.bias, last, a.ln_f.r_std, a.ln_f.mean, a.ln_f.out, rows, n, fused)
    validation.time("ln_f")
    validation.sum("forward.ln_f", a.ln_f.out, T * D)

    unembed_rows, n = (m.last_rows, 1) if last_only else (rows, n)
    # before the softmax, the unembedding also takes each row's largest logit of its blocks
    maxima = launch.matmul("tf_unembedding", a.ln_f.out, p.wte.weight, m.zeros, a.unembedding.out, unembed_rows, n,
                           fused, epilogue="max" if softmax else None, extra=m.softmax_max if softmax else None)
    if softmax:
        launch.unembedding_softmax(a.unembedding.out, unembed_rows, n, m.softmax_max, maxima, m.r_softmax_exp_sum,
                                   probs_copy)
    validation.time("unembedding")
    validation.sum("forward.unembedding", a.unembedding.out, T * V)
    validation.finish("forward")
