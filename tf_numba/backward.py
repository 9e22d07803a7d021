"""tf_process's training half: loss, unembedding backward, the blocks in reverse, embedding
backward. tf.c zeroes the gradients arena and accumulates into it; here each gradient's first
write starts its sum from 0.0f, which gives the same bits without reading the arena (or
writing its 500 MB twice). Only wpe's gradient, of which the embedding backward adds T rows, is
zeroed first (zero_gradients).

The chain of input gradients is the critical path. Parameter gradients feed nothing later in the
pass, so in a recorded pass they run on branches beside it (stream.beside). tf.c reuses one
activations_back for every layer, so each branch is joined before the chain overwrites the
gradient it reads, at the latest one layer further down."""
import numpy as np

from cudakit import stream

from . import kernels as K
from . import launch
from . import matmul as M
from .validation import NO_VALIDATION


def zero_gradients(m):
    """The wpe gradient to zero (the only one added to rather than first written: see above),
    beside the forward pass, which does not touch it."""
    wpe = m.gradients.wpe.weight.reshape(-1)
    with stream.beside("gradients"):
        launch.elementwise(K.tf_memset, wpe.shape[0], wpe, np.float32(0.0))


def fc_back(m, name, weight, inp, dL_dout, dL_dweight, dL_dbias, dL_din, T, epilogue=None, res=None, extra=None):
    """tf_fc_back: three independent sets of sums (tf.c interleaves them; none reads another).
    The weight and bias gradients go on the branch `name`, which reads dL_dout. `epilogue`: the
    element-wise statement tf.c runs next on dL_din (launch.matmul's)."""
    K_in = dL_dweight.shape[0]
    launch.matmul("tf_fc_back_din", dL_dout, weight, m.zeros, dL_din, m.rows(T), T, m.fused, epilogue=epilogue,
                  res=res, extra=extra)
    with stream.beside(name):
        launch.matmul("tf_fc_back_dweight", inp, dL_dout, m.zeros, dL_dweight, m.rows(K_in), K_in, m.fused, S=T)
        launch.elementwise(M.tf_fc_back_dbias, dL_dbias.shape[0], dL_dout, dL_dbias, T)


def unembedding_back(m, wte, ln_f, dL_dout, dL_dwte, dL_din, T):
    """The unembedding backward: two independent sets of sums over dL/dlogits, whose rows may be
    longer than d_vocab (the arena pads them; only d_vocab steps are summed). The wte gradient
    goes on the branch "wte", joined before the embedding backward adds to it."""
    V = dL_dwte.shape[0]
    r_input_size = np.float32(1.0) / np.float32(T)
    launch.matmul("tf_unembedding_back_din", dL_dout, wte, m.zeros, dL_din, m.rows(T), T, m.fused, S=V,
                  scale=r_input_size)
    with stream.beside("wte"):
        launch.matmul("tf_unembedding_back_dwte", dL_dout, ln_f, m.zeros, dL_dwte, m.rows(V), V, m.fused, S=T,
                      scale=r_input_size)


def backward(m, T, validation=NO_VALIDATION):
    """Backward over the forward pass of tokens[0:T], with targets tokens[1:T+1]; that pass copied
    its probabilities into b.unembedding.out (forward's probs_copy)."""
    cfg, p, a, g, b, fused = m.cfg, m.parameters, m.activations, m.gradients, m.activations_back, m.fused
    D, V, d_k, L = cfg.d_model, cfg.d_vocab, cfg.d_k, cfg.n_layers
    last = f"h{L - 1}"
    validation.start()
    stream.join("gradients")

    # dL/dlogits = p - onehot: the softmax's copy of the probabilities (tf.c's memcpy), which the
    # loss kernel edits.
    launch.blocks(K.tf_loss, 1, K.LOSS_THREADS, 0, b.unembedding.out, m.tokens[1:], b.loss, T)
    validation.time("unembedding")
    validation.sum("backward.loss", b.loss, 1)

    unembedding_back(m, p.wte.weight, a.ln_f.out, b.unembedding.out, g.wte.weight, b.ln_f.out, T)
    validation.time("unembedding")
    validation.sum("backward.unembedding.wte", g.wte.weight, V * D)
    validation.sum("backward.ln_f.out", b.ln_f.out, T * D)

    launch.ln_back(p.ln_f.weight, a.h[L - 1].res_2.out, a.ln_f.r_std, a.ln_f.mean, b.ln_f.out,
                   g.ln_f.weight, g.ln_f.bias, b.res_2.out, T, fused)
    validation.time("ln_f")
    validation.sum("backward.ln_f.weight", g.ln_f.weight, D)
    validation.sum("backward.ln_f.bias", g.ln_f.bias, D)
    validation.sum(f"backward.{last}.res_2.out", b.res_2.out, T * D)

    for layer_i in range(L - 1, -1, -1):
        w, x, gw = p.h[layer_i], a.h[layer_i], g.h[layer_i]
        top = layer_i == L - 1
        layer_in = a.embedding.out if layer_i == 0 else a.h[layer_i - 1].res_2.out

        # Each input gradient's next statement (tf_gelu_back, the residual tf_add) runs as its
        # epilogue, so the branch that reads what the epilogue writes is joined before it.
        stream.join("mlp.c_fc")  # the layer above's c_fc weight gradient reads b.mlp.c_fc.out
        fc_back(m, "mlp.c_proj", w.mlp.c_proj.weight, x.mlp.gelu.out, b.res_2.out, gw.mlp.c_proj.weight,
                gw.mlp.c_proj.bias, b.mlp.gelu.out, T, epilogue="gelu_back", res=x.mlp.c_fc.out,
                extra=b.mlp.c_fc.out)
        validation.time("mlp.c_proj")
        if top:
            validation.sum(f"backward.{last}.mlp.c_proj.weight", gw.mlp.c_proj.weight, 4 * D * D)
            validation.sum(f"backward.{last}.mlp.c_proj.bias", gw.mlp.c_proj.bias, D)
            validation.sum(f"backward.{last}.mlp.gelu.out", b.mlp.gelu.out, T * 4 * D)
        validation.time("mlp.gelu")
        if top:
            validation.sum(f"backward.{last}.mlp.c_fc.out", b.mlp.c_fc.out, T * 4 * D)

        fc_back(m, "mlp.c_fc", w.mlp.c_fc.weight, x.ln_2.out, b.mlp.c_fc.out, gw.mlp.c_fc.weight, gw.mlp.c_fc.bias,
                b.ln_2.out, T)
        validation.time("mlp.c_fc")
        if top:
            validation.sum(f"backward.{last}.mlp.c_fc.weight", gw.mlp.c_fc.weight, D * 4 * D)
            validation.sum(f"backward.{last}.mlp.c_fc.bias", gw.mlp.c_fc.bias, 4 * D)
            validation.sum(f"backward.{last}.ln_2.out", b.ln_2.out, T * D)

        stream.join("attn.c_proj")  # the layer above's reads b.res_1.out
        launch.ln_back(w.ln_2.weight, x.res_1.out, x.ln_2.r_std, x.ln_2.mean, b.ln_2.out,
                       gw.ln_2.weight, gw.ln_2.bias, b.res_2.in_2, T, fused, res=b.res_2.out, extra=b.res_1.out)
        validation.time("ln_2")
        if top:
            validation.sum(f"backward.{last}.ln_2.weight", gw.ln_2.weight, D)
            validation.sum(f"backward.{last}.ln_2.bias", gw.ln_2.bias, D)
            validation.sum(f"backward.{last}.res_2.in_2", b.res_2.in_2, T * D)
        validation.time("res_2")
        if top:
            validation.sum(f"backward.{last}.res_1.out", b.res_1.out, T * D)

        fc_back(m, "attn.c_proj", w.attn.c_proj.weight, x.attn.z.out, b.res_1.out, gw.attn.c_proj.weight,
                gw.attn.c_proj.bias, b.attn.z.out, T)
        validation.time("attn.c_proj")
        if top:
            validation.sum(f"backward.{last}.attn.c_proj.weight", gw.attn.c_proj.weight, D * D)
            validation.sum(f"backward.{last}.attn.c_proj.bias", gw.attn.c_proj.bias, D)
            validation.sum(f"backward.{last}.attn.z", b.attn.z.out, T * D)

        stream.join("attn.c_attn")  # the layer above's reads b.attn.c_attn.out
        launch.attn_back_row(b.attn.z.out, x.attn.c_attn.out, x.attn.softmax.out, b.attn.softmax.out, T, d_k, fused)
        launch.elementwise(K.tf_attn_back_qkv, T * 3 * D, b.attn.z.out, x.attn.c_attn.out, x.attn.softmax.out,
                           b.attn.softmax.out, b.attn.c_attn.out, T, d_k, m.rsqrt_d_k, fused)
        validation.time("attn.z")
        if top:
            validation.sum(f"backward.{last}.attn.c_attn.out", b.attn.c_attn.out, T * 3 * D)

        fc_back(m, "attn.c_attn", w.attn.c_attn.weight, x.ln_1.out, b.attn.c_attn.out, gw.attn.c_attn.weight,
                gw.attn.c_attn.bias, b.ln_1.out, T)
        validation.time("attn.c_attn")
        if top:
            validation.sum(f"backward.{last}.attn.c_attn.weight", gw.attn.c_attn.weight, D * 3 * D)
            validation.sum(f"backward.{last}.attn.c_attn.bias", gw.attn.c_attn.bias, 3 * D)
            validation.sum(f"backward.{last}.ln_1.out", b.ln_1.out, T * D)

        below = b.embedding.out if layer_i == 0 else b.res_2.out
        stream.join("mlp.c_proj")  # this layer's reads b.res_2.out
        launch.ln_back(w.ln_1.weight, layer_in, x.ln_1.r_std, x.ln_1.mean, b.ln_1.out,
                       gw.ln_1.weight, gw.ln_1.bias, b.res_1.in_2, T, fused, res=b.res_1.out, extra=below)
        validation.time("ln_1")
        if top:
            validation.sum(f"backward.{last}.ln_1.weight", gw.ln_1.weight, D)
            validation.sum(f"backward.{last}.ln_1.bias", gw.ln_1.bias, D)
            validation.sum(f"backward.{last}.res_1.in_2", b.res_1.in_2, T * D)
        validation.time("res_1")
        if top:  # tf.c sums res_2.out here, also when (one layer) the add wrote the embedding's
            validation.sum(f"backward.h{max(L - 2, 0)}.res_2.out", b.res_2.out, T * D)

    stream.join("wte")
    launch.elementwise(K.tf_embedding_back, D, b.embedding.out, m.tokens, g.wte.weight, g.wpe.weight, T)
    validation.time("embedding")
    validation.sum("backward.wte", g.wte.weight, V * D)
    validation.sum("backward.wpe", g.wpe.weight, T * D)
    validation.finish("backward")
