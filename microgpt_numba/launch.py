"""Host-side launches with microgpt.cu's grid/block shapes, and its memset/memcpy helpers.

Every launch goes to cudakit's current stream: the default one, or a CUDA graph being recorded,
so the same launch sequence either runs or is recorded once and replayed (graphs.py).
Scalars cross as float32 (a Python float would make Numba compile the kernel in float64).
"""
import numpy as np

from cudakit.stream import Target

from . import kernels as k
from .constants import N_EMBD, N_HEAD

SGEMV_N_THREADS = 64  # sgemv_n_kernel's block (the widest cols, MLP_HIDDEN): the sums, and all threads staging


def _threads(n):
    return n if n < 256 else 256


def _blocks(n):
    return (n + 255) // 256


def zero_device(x):
    k.zero_kernel[_blocks(x.size), _threads(x.size), Target.stream](x, x.size)


def copy_device(dst, src):
    k.copy_kernel[_blocks(dst.size), _threads(dst.size), Target.stream](dst, src, dst.size)


def copy_to_host(dst, src):
    src.copy_to_host(dst)


def launch_vec_add(a, b, out, n):
    k.vec_add_kernel[1, _threads(n), Target.stream](a, b, out, n)


def launch_token_embed(wte, pos_emb, tokens, pos_id, out, n):
    k.token_embed_kernel[1, _threads(n), Target.stream](wte, pos_emb, tokens, pos_id, out, n)


def launch_vec_add_inplace(dst, src, n):
    k.vec_add_inplace_kernel[1, _threads(n), Target.stream](dst, src, n)


def launch_relu_forward(x, y, n):
    k.relu_forward_kernel[1, _threads(n), Target.stream](x, y, n)


def launch_relu_backward(x, grad_y, grad_x, n):
    k.relu_backward_kernel[1, _threads(n), Target.stream](x, grad_y, grad_x, n)


def _floats(count):
    return 4 * count


def launch_matvec(w, x, y, rows, cols):
    k.sgemv_t_kernel[_blocks(rows), _threads(rows), Target.stream](w, x, y, rows, cols)


def launch_linear_backward(w, x, grad_out, grad_w, grad_x, rows, cols):
    """grad_w += grad_out x^T (sger), then grad_x += w^T grad_out (sgemv N), as the C's two cuBLAS calls."""
    k.sger_kernel[_blocks(rows * cols), _threads(rows * cols), Target.stream](x, grad_out, grad_w, rows, cols)
    assert cols <= SGEMV_N_THREADS
    k.sgemv_n_kernel[1, SGEMV_N_THREADS, Target.stream, _floats(rows + rows * cols)](w, grad_out, grad_x, rows, cols)


def launch_rmsnorm_forward(x, y, n):
    assert n <= N_EMBD  # the kernel's shared copy
    k.rmsnorm_forward_kernel[1, n, Target.stream](x, y, n)


def launch_rmsnorm_backward(x, grad_y, grad_x, n):
    assert n <= N_EMBD
    k.rmsnorm_backward_kernel[1, n, Target.stream](x, grad_y, grad_x, n)


def launch_scaled_softmax(logits, probs, scale, n):
    k.scaled_softmax_kernel[1, k.SOFTMAX_THREADS, Target.stream](logits, probs, np.float32(scale), n)


def launch_target_prob(probs, tokens, pos_id, target_probs):
    k.target_prob_kernel[1, 1, Target.stream](probs, tokens, pos_id, target_probs)


def launch_cross_entropy_backward(probs, grad_logits, tokens, pos_id, loss_scale, n):
    k.cross_entropy_backward_kernel[1, _threads(n), Target.stream](probs, grad_logits, tokens, pos_id,
                                                             np.float32(loss_scale), n)


def launch_attention_forward(q, keys, values, attn_logits, attn_weights, attn_out, pos_id):
    k.attention_forward_kernel[1, N_HEAD, Target.stream](q, keys, values, attn_logits, attn_weights, attn_out, pos_id)


def launch_attention_backward(q, keys, values, attn_weights, grad_attn_out, grad_q, grad_keys, grad_values, pos_id):
    k.attention_backward_kernel[1, N_HEAD, Target.stream](q, keys, values, attn_weights, grad_attn_out, grad_q,
                                                    grad_keys, grad_values, pos_id)


def launch_adam_update(data, grad, m, v, schedule, n):
    k.adam_update_kernel[_blocks(n), _threads(n), Target.stream](data, grad, m, v, schedule, n)


def launch_row_add(row_grad, grad, n):
    k.row_add_kernel[1, _threads(n), Target.stream](row_grad, grad, n)


def launch_token_row_add(wte_grad, tokens, pos_id, grad, n):
    k.token_row_add_kernel[1, _threads(n), Target.stream](wte_grad, tokens, pos_id, grad, n)
