"""Host-side launches with microgpt.cu's grid/block shapes, and its memset/memcpy helpers.

Scalars cross as float32 (a Python float would make Numba compile the kernel in float64).
"""
import numpy as np

from . import kernels as k
from .constants import N_HEAD


def _threads(n):
    return n if n < 256 else 256


def _blocks(n):
    return (n + 255) // 256


def copy_device(dst, src):
    dst.copy_to_device(src)


def copy_to_host(dst, src):
    src.copy_to_host(dst)


def launch_vec_add(a, b, out, n):
    k.vec_add_kernel[1, _threads(n)](a, b, out, n)


def launch_vec_add_inplace(dst, src, n):
    k.vec_add_inplace_kernel[1, _threads(n)](dst, src, n)


def launch_relu_forward(x, y, n):
    k.relu_forward_kernel[1, _threads(n)](x, y, n)


def launch_relu_backward(x, grad_y, grad_x, n):
    k.relu_backward_kernel[1, _threads(n)](x, grad_y, grad_x, n)


def launch_matvec(w, x, y, rows, cols):
    k.sgemv_t_kernel[_blocks(rows), _threads(rows)](w, x, y, rows, cols)


def launch_linear_backward(w, x, grad_out, grad_w, grad_x, rows, cols):
    """grad_w += grad_out x^T (sger), then grad_x += w^T grad_out (sgemv N), as the C's two cuBLAS calls."""
    k.sger_kernel[_blocks(rows * cols), _threads(rows * cols)](x, grad_out, grad_w, rows, cols)
    k.sgemv_n_kernel[_blocks(cols), _threads(cols)](w, grad_out, grad_x, rows, cols)


def launch_rmsnorm_forward(x, y, n):
    k.rmsnorm_forward_kernel[1, 1](x, y, n)


def launch_rmsnorm_backward(x, grad_y, grad_x, n):
    k.rmsnorm_backward_kernel[1, 1](x, grad_y, grad_x, n)


def launch_scaled_softmax(logits, probs, scale, n):
    k.scaled_softmax_kernel[1, k.SOFTMAX_THREADS](logits, probs, np.float32(scale), n)


def launch_cross_entropy_backward(probs, grad_logits, target_id, loss_scale, n):
    k.cross_entropy_backward_kernel[1, _threads(n)](probs, grad_logits, target_id, np.float32(loss_scale), n)


def launch_attention_forward(q, keys, values, attn_logits, attn_weights, attn_out, pos_id):
    k.attention_forward_kernel[1, N_HEAD](q, keys, values, attn_logits, attn_weights, attn_out, pos_id)


def launch_attention_backward(q, keys, values, attn_weights, grad_attn_out, grad_q, grad_keys, grad_values, pos_id):
    k.attention_backward_kernel[1, N_HEAD](q, keys, values, attn_weights, grad_attn_out, grad_q,
                                           grad_keys, grad_values, pos_id)


def launch_adam_update(data, grad, m, v, lr_t, beta1_corr, beta2_corr, n):
    k.adam_update_kernel[_blocks(n), _threads(n)](data, grad, m, v, np.float32(lr_t), np.float32(beta1_corr),
                                                  np.float32(beta2_corr), n)


def launch_row_add(row_grad, grad, n):
    k.row_add_kernel[1, _threads(n)](row_grad, grad, n)

