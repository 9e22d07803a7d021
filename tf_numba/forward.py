"""tf_process's forward half: embedding, n_layers blocks, ln_f, unembedding with softmax."""
from . import kernels as K
from .kernels import launch
from .probe import NO_PROBE


def forward(m, T, is_training, probe=NO_PROBE):
    """The forward pass over tokens[0:T]. Training computes every row's probabilities;
    generation only the last row's, as tf.c does."""
    cfg, p, a, fused = m.cfg, m.parameters, m.activations, m.fused
    D, H, V, d_k = cfg.d_model, cfg.n_heads, cfg.d_vocab, cfg.d_k
    probe.start()

    launch(K.tf_embedding, T * D, p.wte.weight, p.wpe.weight, m.tokens, a.embedding.out, T)
    probe.time("embedding")
    probe.sum("forward.embedding", a.embedding.out, T * D)

    for layer_i in range(cfg.n_layers):
        w, x = p.h[layer_i], a.h[layer_i]
        first = layer_i == 0
        layer_in = a.embedding.out if first else a.h[layer_i - 1].res_2.out

        launch(K.tf_ln, T, w.ln_1.weight, w.ln_1.bias, layer_in, x.ln_1.r_std, x.ln_1.mean, x.ln_1.out, T, fused)
        probe.time("ln_1")
        if first:
            probe.sum("forward.h0.ln_1", x.ln_1.out, T * D)

        launch(K.tf_fc, T * 3 * D, w.attn.c_attn.weight, w.attn.c_attn.bias, x.ln_1.out, x.attn.c_attn.out, T, fused)
        probe.time("attn.c_attn")
        if first:
            probe.sum("forward.h0.attn.c_attn", x.attn.c_attn.out, T * 3 * D)

        launch(K.tf_attn_scores, H * T * T, x.attn.c_attn.out, x.attn.softmax.out, T, d_k, m.rsqrt_d_k, fused)
        launch(K.tf_attn_softmax, H * T, x.attn.softmax.out, T)
        launch(K.tf_attn_z, T * D, x.attn.c_attn.out, x.attn.softmax.out, x.attn.z.out, T, d_k, fused)
        probe.time("attn.z")
        if first:
            probe.sum("forward.h0.attn.z", x.attn.z.out, T * D)

        launch(K.tf_fc, T * D, w.attn.c_proj.weight, w.attn.c_proj.bias, x.attn.z.out, x.attn.c_proj.out, T, fused)
        probe.time("attn.c_proj")
        if first:
            probe.sum("forward.h0.attn.c_proj", x.attn.c_proj.out, T * D)

        launch(K.tf_add, T * D, layer_in, x.attn.c_proj.out, x.res_1.out, T)
        probe.time("res_1")

        launch(K.tf_ln, T, w.ln_2.weight, w.ln_2.bias, x.res_1.out, x.ln_2.r_std, x.ln_2.mean, x.ln_2.out, T, fused)
        probe.time("ln_2")
        if first:
            probe.sum("forward.h0.ln_2", x.ln_2.out, T * D)

        launch(K.tf_fc, T * 4 * D, w.mlp.c_fc.weight, w.mlp.c_fc.bias, x.ln_2.out, x.mlp.c_fc.out, T, fused)
        probe.time("mlp.c_fc")

        launch(K.tf_gelu, T * 4 * D, x.mlp.c_fc.out, x.mlp.gelu.out, T)
        probe.time("mlp.gelu")

        launch(K.tf_fc, T * D, w.mlp.c_proj.weight, w.mlp.c_proj.bias, x.mlp.gelu.out, x.mlp.c_proj.out, T, fused)
        probe.time("mlp.c_proj")
        if first:
            probe.sum("forward.h0.mlp.c_proj", x.mlp.c_proj.out, T * D)

        launch(K.tf_add, T * D, x.res_1.out, x.mlp.c_proj.out, x.res_2.out, T)
        probe.time("res_2")

    last = a.h[cfg.n_layers - 1].res_2.out
    launch(K.tf_ln, T, p.ln_f.weight, p.ln_f.bias, last, a.ln_f.r_std, a.ln_f.mean, a.ln_f.out, T, fused)
    probe.time("ln_f")
    probe.sum("forward.ln_f", a.ln_f.out, T * D)

    row_0 = 0 if is_training else T - 1
    launch(K.tf_unembedding, (T - row_0) * V, p.wte.weight, a.ln_f.out, a.unembedding.out, row_0, T, fused)
    K.tf_unembedding_softmax[T - row_0, K.SOFTMAX_THREADS](a.unembedding.out, row_0)
    probe.time("unembedding")
    probe.sum("forward.unembedding", a.unembedding.out, T * V)
    probe.finish("forward")
