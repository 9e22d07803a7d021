"""The reference engine: microgpt.cu's forward_position, forward_sequence, backward_sequence and
adam_update_model, one kernel launch (or memset/memcpy) per C launch, in the C's order."""
import numpy as np

from .arena import zero_device
from .constants import BETA1, BETA2, LEARNING_RATE, MLP_HIDDEN, N_EMBD, N_LAYER
from .glibc_rand import logf, powf
from .launch import (copy_device, copy_to_host, launch_adam_update, launch_attention_backward,
                     launch_attention_forward, launch_cross_entropy_backward, launch_linear_backward,
                     launch_matvec, launch_relu_backward, launch_relu_forward, launch_rmsnorm_backward,
                     launch_rmsnorm_forward, launch_row_add, launch_scaled_softmax, launch_vec_add,
                     launch_vec_add_inplace)

PROB_FLOOR = np.float32(1e-20)


def forward_position(model, cache, vocab_size, token_id, pos_id):
    pos = cache.pos[pos_id]
    pos.token_id = token_id

    tok_emb = model.wte.data[token_id * N_EMBD:(token_id + 1) * N_EMBD]
    pos_emb = model.wpe.data[pos_id * N_EMBD:(pos_id + 1) * N_EMBD]
    launch_vec_add(tok_emb, pos_emb, pos.embed_in, N_EMBD)
    launch_rmsnorm_forward(pos.embed_in, pos.x0, N_EMBD)

    for layer in range(N_LAYER):
        lc = pos.layers[layer]
        copy_device(lc.x_in, pos.layer_input(layer))

        launch_rmsnorm_forward(lc.x_in, lc.attn_norm, N_EMBD)
        launch_matvec(model.attn_wq[layer].data, lc.attn_norm, lc.q, N_EMBD, N_EMBD)
        launch_matvec(model.attn_wk[layer].data, lc.attn_norm, lc.k, N_EMBD, N_EMBD)
        launch_matvec(model.attn_wv[layer].data, lc.attn_norm, lc.v, N_EMBD, N_EMBD)
        launch_attention_forward(lc.q, cache.keys[layer], cache.values[layer], lc.attn_logits,
                                 lc.attn_weights, lc.attn_out, pos_id)

        launch_matvec(model.attn_wo[layer].data, lc.attn_out, lc.attn_proj, N_EMBD, N_EMBD)
        launch_vec_add(lc.attn_proj, lc.x_in, lc.mlp_in, N_EMBD)

        launch_rmsnorm_forward(lc.mlp_in, lc.mlp_norm, N_EMBD)
        launch_matvec(model.mlp_fc1[layer].data, lc.mlp_norm, lc.fc1, MLP_HIDDEN, N_EMBD)
        launch_relu_forward(lc.fc1, lc.relu, MLP_HIDDEN)
        launch_matvec(model.mlp_fc2[layer].data, lc.relu, lc.fc2, N_EMBD, MLP_HIDDEN)
        launch_vec_add(lc.fc2, lc.mlp_in, lc.x_out, N_EMBD)

    launch_matvec(model.lm_head.data, pos.final_hidden(), pos.logits, vocab_size, N_EMBD)


def forward_sequence(model, cache, dataset, tokens, n):
    """Mean cross-entropy over positions 0..n-1, summed on the host in float32 as the C does."""
    total_loss = np.float32(0.0)
    host_probs = np.empty(dataset.vocab_size, dtype=np.float32)
    for pos in range(n):
        pc = cache.pos[pos]
        pc.target_id = tokens[pos + 1]
        forward_position(model, cache, dataset.vocab_size, tokens[pos], pos)
        launch_scaled_softmax(pc.logits, pc.probs, 1.0, dataset.vocab_size)
        copy_to_host(host_probs, pc.probs)
        total_loss += position_loss(host_probs[pc.target_id])
    return total_loss / np.float32(n)


def position_loss(prob):
    """-logf(prob) with the C's 1e-20 floor, on the host with glibc's logf."""
    return -np.float32(logf(max(prob, PROB_FLOOR)))


def zero_attention_accums(cache):
    for layer in range(N_LAYER):
        zero_device(cache.grad_keys[layer])
        zero_device(cache.grad_values[layer])


def backward_sequence(model, cache, scratch, dataset, n):
    """Gradients of forward_sequence's loss, accumulated into every Param.grad."""
    zero_attention_accums(cache)
    loss_scale = np.float32(1.0) / np.float32(n)

    for pos in range(n - 1, -1, -1):
        pc = cache.pos[pos]
        launch_cross_entropy_backward(pc.probs, scratch.grad_logits, pc.target_id, loss_scale, dataset.vocab_size)

        zero_device(scratch.grad_x)
        launch_linear_backward(model.lm_head.data, pc.final_hidden(), scratch.grad_logits, model.lm_head.grad,
                               scratch.grad_x, dataset.vocab_size, N_EMBD)

        for layer in range(N_LAYER - 1, -1, -1):
            lc = pc.layers[layer]

            copy_device(scratch.grad_mlp_in, scratch.grad_x)
            zero_device(scratch.grad_relu)
            launch_linear_backward(model.mlp_fc2[layer].data, lc.relu, scratch.grad_x, model.mlp_fc2[layer].grad,
                                   scratch.grad_relu, N_EMBD, MLP_HIDDEN)

            zero_device(scratch.grad_fc1)
            launch_relu_backward(lc.fc1, scratch.grad_relu, scratch.grad_fc1, MLP_HIDDEN)

            zero_device(scratch.grad_mlp_norm)
            launch_linear_backward(model.mlp_fc1[layer].data, lc.mlp_norm, scratch.grad_fc1,
                                   model.mlp_fc1[layer].grad, scratch.grad_mlp_norm, MLP_HIDDEN, N_EMBD)

            zero_device(scratch.grad_norm_tmp)
            launch_rmsnorm_backward(lc.mlp_in, scratch.grad_mlp_norm, scratch.grad_norm_tmp, N_EMBD)
            launch_vec_add_inplace(scratch.grad_mlp_in, scratch.grad_norm_tmp, N_EMBD)

            copy_device(scratch.grad_x_in, scratch.grad_mlp_in)
            zero_device(scratch.grad_attn_out)
            launch_linear_backward(model.attn_wo[layer].data, lc.attn_out, scratch.grad_mlp_in,
                                   model.attn_wo[layer].grad, scratch.grad_attn_out, N_EMBD, N_EMBD)

            zero_device(scratch.grad_attn_norm)
            launch_attention_backward(lc.q, cache.keys[layer], cache.values[layer], lc.attn_weights,
                                      scratch.grad_attn_out, scratch.grad_q, cache.grad_keys[layer],
                                      cache.grad_values[layer], pos)

            launch_linear_backward(model.attn_wq[layer].data, lc.attn_norm, scratch.grad_q,
                                   model.attn_wq[layer].grad, scratch.grad_attn_norm, N_EMBD, N_EMBD)
            launch_linear_backward(model.attn_wk[layer].data, lc.attn_norm, cache.grad_k_accum[layer][pos],
                                   model.attn_wk[layer].grad, scratch.grad_attn_norm, N_EMBD, N_EMBD)
            launch_linear_backward(model.attn_wv[layer].data, lc.attn_norm, cache.grad_v_accum[layer][pos],
                                   model.attn_wv[layer].grad, scratch.grad_attn_norm, N_EMBD, N_EMBD)

            zero_device(scratch.grad_norm_tmp)
            launch_rmsnorm_backward(lc.x_in, scratch.grad_attn_norm, scratch.grad_norm_tmp, N_EMBD)
            launch_vec_add_inplace(scratch.grad_x_in, scratch.grad_norm_tmp, N_EMBD)
            copy_device(scratch.grad_x, scratch.grad_x_in)

        zero_device(scratch.grad_embed_in)
        launch_rmsnorm_backward(pc.embed_in, scratch.grad_x, scratch.grad_embed_in, N_EMBD)
        launch_row_add(model.wte.grad[pc.token_id * N_EMBD:(pc.token_id + 1) * N_EMBD], scratch.grad_embed_in, N_EMBD)
        launch_row_add(model.wpe.grad[pos * N_EMBD:(pos + 1) * N_EMBD], scratch.grad_embed_in, N_EMBD)


def adam_schedule(step, total_steps):
    """(lr_t, 1 - beta1^(step+1), 1 - beta2^(step+1)) in host float32 with glibc's powf, as the C."""
    beta1_pow = np.float32(powf(BETA1, np.float32(step + 1)))
    beta2_pow = np.float32(powf(BETA2, np.float32(step + 1)))
    lr_t = LEARNING_RATE * (np.float32(1.0) - np.float32(step) / np.float32(total_steps))
    return lr_t, np.float32(1.0) - beta1_pow, np.float32(1.0) - beta2_pow


def adam_update_model(model, step, total_steps):
    lr_t, beta1_corr, beta2_corr = adam_schedule(step, total_steps)
    for param in model.params():
        launch_adam_update(param.data, param.grad, param.m, param.v, lr_t, beta1_corr, beta2_corr, param.count())
