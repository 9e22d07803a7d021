"""tf.c's 39 validation checkpoints: what each `tf_validation_sum` call sums, in tf.c's order.

A checkpoint is the sequential double sum of a float array (tf_validation_sum). Labels name
the array after tf.c's structs: `forward.*` reads `tf_activations`, `backward.*` reads
`tf_gradients` (`.weight`/`.bias`, `backward.wte`, `backward.wpe`) or `tf_activations_back`
(the rest, each the gradient of the loss with respect to that activation). tf.c checks the
forward arrays of layer 0 and the backward arrays of the last layer; `gradients.wte` is
checked twice, after the unembedding backward and after the embedding backward.
"""
from .config import INPUT_SIZE, Config


def checkpoints(cfg: Config, input_size: int = INPUT_SIZE):
    """[(label, element count)] for every tf_validation_sum call, in tf.c's order."""
    T, D, V = input_size, cfg.d_model, cfg.d_vocab
    last = f"h{cfg.n_layers - 1}"
    # tf.c sums activations_back.res_2.out after the last layer's closing add: dL/d(the
    # previous layer's res_2.out). With one layer that add writes the embedding's gradient
    # instead, and the sum repeats ln_f's input gradient (dL/d h0.res_2.out).
    below = f"h{max(cfg.n_layers - 2, 0)}.res_2.out"
    return [
        ("forward.embedding", T * D),
        ("forward.h0.ln_1", T * D),
        ("forward.h0.attn.c_attn", T * 3 * D),
        ("forward.h0.attn.z", T * D),
        ("forward.h0.attn.c_proj", T * D),
        ("forward.h0.ln_2", T * D),
        ("forward.h0.mlp.c_proj", T * D),
        ("forward.ln_f", T * D),
        ("forward.unembedding", T * V),
        ("backward.loss", 1),
        ("backward.unembedding.wte", V * D),
        ("backward.ln_f.out", T * D),
        ("backward.ln_f.weight", D),
        ("backward.ln_f.bias", D),
        (f"backward.{last}.res_2.out", T * D),
        (f"backward.{last}.mlp.c_proj.weight", 4 * D * D),
        (f"backward.{last}.mlp.c_proj.bias", D),
        (f"backward.{last}.mlp.gelu.out", T * 4 * D),
        (f"backward.{last}.mlp.c_fc.out", T * 4 * D),
        (f"backward.{last}.mlp.c_fc.weight", D * 4 * D),
        (f"backward.{last}.mlp.c_fc.bias", 4 * D),
        (f"backward.{last}.ln_2.out", T * D),
        (f"backward.{last}.ln_2.weight", D),
        (f"backward.{last}.ln_2.bias", D),
        (f"backward.{last}.res_2.in_2", T * D),
        (f"backward.{last}.res_1.out", T * D),
        (f"backward.{last}.attn.c_proj.weight", D * D),
        (f"backward.{last}.attn.c_proj.bias", D),
        (f"backward.{last}.attn.z", T * D),
        (f"backward.{last}.attn.c_attn.out", T * 3 * D),
        (f"backward.{last}.attn.c_attn.weight", D * 3 * D),
        (f"backward.{last}.attn.c_attn.bias", 3 * D),
        (f"backward.{last}.ln_1.out", T * D),
        (f"backward.{last}.ln_1.weight", D),
        (f"backward.{last}.ln_1.bias", D),
        (f"backward.{last}.res_1.in_2", T * D),
        (f"backward.{below}", T * D),
        ("backward.wte", V * D),
        ("backward.wpe", T * D),
    ]


# tf.c's own expected sums (the `tf_validation_sum` constants of the seed tf.c, in order),
# valid for the real GPT-2 124M weights under tf.c's build (fma) at INPUT_SIZE inputs.
TF_C_SUMS = [float.fromhex(h) for h in """
    -0x1.e86f2c2adep+4 -0x1.4e34ee18da56ap+8 -0x1.9f967d2b7f151p+11 0x1.c64a4db1bfcdep+8
    0x1.850b3ffab297bp+8 0x1.188ffb5000f3dp+8 -0x1.012ce31d82fb8p+9 0x1.0437f5b8f47d8p+14
    0x1.0008be62ee50cp+6 0x1.08868ep+8 0x1.7f5c4d133539p-6 -0x1.4adb0746d50fap-5
    -0x1.1264bf0ff8p-1 -0x1.4adaf7184p-5 -0x1.690e462bp-27 -0x1.3d7e7fe8p-23
    -0x1.6264p-27 -0x1.627d327e64f6cp-1 0x1.2e4527c197bcbp-5 -0x1.200760d8e8494p+1
    0x1.2e452d5568p-5 0x1.e762c70de442dp+0 -0x1.f2a6e6d9a1p-1 0x1.e762c5ac36p+0
    -0x1.3869712ap-27 -0x1.50b057dap-26 -0x1.f4f260d4p-24 -0x1.564ep-26
    -0x1.0780431d99d0fp-3 -0x1.1fc8ca5c4b7b6p-3 -0x1.689f62d6a3abdp+0 -0x1.1fc8c86b866a4p-3
    0x1.96e7bad126e79p-1 -0x1.760ab5b77p-2 0x1.96e7bdf08ap-1 0x1.6d00ac5p-27
    -0x1.49a7d8p-27 0x1.7f75a7f7bb39p-6 0x1.e96f7cp-20
""".split()]


def c_hex(x: float) -> str:
    """x as C's printf("%a") writes it (Python's float.hex pads the mantissa with zeros)."""
    h = float(x).hex()
    if "p" not in h:  # inf, nan
        return h
    mantissa, exponent = h.split("p")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}p{exponent}"
