"""The reference engine: microgpt.cu's forward_position, forward_sequence, backward_sequence,
adam_update_model and main's training loop, one kernel launch per C launch (memsets and copies
included), in the C's order.

What changes from step to step (the tokens, Adam's schedule, the loss) lives in device memory
(StepValues), so that one step's launches can be recorded once per sequence length and replayed
(graphs.py). The steps' tokens and schedule are uploaded a batch of steps at a time (StepTable) and a
step's row is copied into StepValues on the device, so steps can be queued without the host waiting on each.
Each position's target probability is copied out per step, and the host takes the loss from them
as the C does (sequence_loss).
"""
import numpy as np
from numba import config, cuda

from .constants import BETA1, BETA2, BLOCK_SIZE, LEARNING_RATE, MLP_HIDDEN, N_EMBD, N_LAYER
from .dataset import tokenize_doc, trained_positions
from .glibc_rand import logf, powf
from .graphs import StepGraphs
from .launch import (copy_device, launch_adam_update, launch_attention_backward, launch_attention_forward,
                     launch_cross_entropy_backward, launch_linear_backward, launch_matvec,
                     launch_relu_backward, launch_relu_forward, launch_rmsnorm_backward, launch_rmsnorm_forward,
                     launch_row_add, launch_scaled_softmax, launch_target_prob, launch_token_embed,
                     launch_token_row_add, launch_vec_add, launch_vec_add_inplace, zero_device)


class StepTable:
    """Steps first_step..first_step+len(token_lists)-1 of a run of total_steps: each step's tokens (BOS,
    the document, BOS; zero-padded to BLOCK_SIZE + 2) and Adam's schedule, in device memory, row i
    holding step first_step + i (train builds one table per batch of steps, so that memory does not
    grow with the run's length)."""

    def __init__(self, token_lists, total_steps, first_step=0):
        tokens = np.zeros((len(token_lists), BLOCK_SIZE + 2), dtype=np.int32)
        for step, step_tokens in enumerate(token_lists):
            tokens[step, :len(step_tokens)] = step_tokens
        schedule = np.array([adam_schedule(first_step + step, total_steps) for step in range(len(token_lists))],
                            dtype=np.float32).reshape(len(token_lists), 3)
        self.tokens = cuda.to_device(tokens)
        self.schedule = cuda.to_device(schedule)


class StepValues:
    """tokens: the document's tokens (or the sampled prefix); schedule: (lr_t, 1 - beta1^t, 1 - beta2^t);
    target_probs: each position's probability of its target, what forward_sequence copies to the host."""

    def __init__(self):
        self.tokens = cuda.to_device(np.zeros(BLOCK_SIZE + 2, dtype=np.int32))
        self.schedule = cuda.to_device(np.zeros(3, dtype=np.float32))
        self.target_probs = cuda.to_device(np.zeros(BLOCK_SIZE, dtype=np.float32))

    def set_step(self, table, step, stream=0):
        """Copies the table's row for step, device to device, in stream order."""
        self.tokens.copy_to_device(table.tokens[step], stream=stream)
        self.schedule.copy_to_device(table.schedule[step], stream=stream)

    def set_token(self, pos, token_id):
        self.tokens[pos:pos + 1].copy_to_device(np.array([token_id], dtype=np.int32))

    def mean_loss(self, n):
        return sequence_loss(self.target_probs.copy_to_host(), n)


def forward_position(model, cache, vocab_size, sv, pos_id):
    """Position pos_id's forward pass for the token sv.tokens[pos_id], caching its activations."""
    pos = cache.pos[pos_id]
    pos_emb = model.wpe.data[pos_id * N_EMBD:(pos_id + 1) * N_EMBD]
    launch_token_embed(model.wte.data, pos_emb, sv.tokens, pos_id, pos.embed_in, N_EMBD)
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


def forward_sequence(model, cache, dataset, sv, n):
    """Positions 0..n-1 of sv.tokens; sv.target_probs[pos] becomes probs[target] (the loss is the host's:
    sequence_loss)."""
    for pos in range(n):
        pc = cache.pos[pos]
        forward_position(model, cache, dataset.vocab_size, sv, pos)
        launch_scaled_softmax(pc.logits, pc.probs, 1.0, dataset.vocab_size)
        launch_target_prob(pc.probs, sv.tokens, pos, sv.target_probs)


PROB_FLOOR = np.float32(1e-20)


def sequence_loss(target_probs, n):
    """forward_sequence's host half: total_loss += -logf(prob) over positions 0..n-1 in order, each
    prob floored at 1e-20f, in float with glibc's logf, then divided by n."""
    total = np.float32(0.0)
    for prob in target_probs[:n]:
        total = np.float32(total + np.float32(-logf(max(np.float32(prob), PROB_FLOOR))))
    return total / np.float32(n)


def zero_attention_accums(cache):
    for layer in range(N_LAYER):
        zero_device(cache.grad_keys[layer])
        zero_device(cache.grad_values[layer])


def backward_sequence(model, cache, scratch, dataset, sv, n):
    """Gradients of forward_sequence's mean loss, accumulated into every Param.grad."""
    zero_attention_accums(cache)
    loss_scale = np.float32(1.0) / np.float32(n)

    for pos in range(n - 1, -1, -1):
        pc = cache.pos[pos]
        launch_cross_entropy_backward(pc.probs, scratch.grad_logits, sv.tokens, pos, loss_scale, dataset.vocab_size)

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
        launch_token_row_add(model.wte.grad, sv.tokens, pos, scratch.grad_embed_in, N_EMBD)
        launch_row_add(model.wpe.grad[pos * N_EMBD:(pos + 1) * N_EMBD], scratch.grad_embed_in, N_EMBD)


def adam_schedule(step, total_steps):
    """(lr_t, 1 - beta1^(step+1), 1 - beta2^(step+1)) in host float32 with glibc's powf, as the C."""
    beta1_pow = np.float32(powf(BETA1, np.float32(step + 1)))
    beta2_pow = np.float32(powf(BETA2, np.float32(step + 1)))
    lr_t = LEARNING_RATE * (np.float32(1.0) - np.float32(step) / np.float32(total_steps))
    return lr_t, np.float32(1.0) - beta1_pow, np.float32(1.0) - beta2_pow


def adam_update_model(model, sv):
    for param in model.params():
        launch_adam_update(param.data, param.grad, param.m, param.v, sv.schedule, param.count())


def train_step(model, cache, scratch, dataset, sv, n):
    """One step's launches for a document of n positions: what graphs.py records per n."""
    forward_sequence(model, cache, dataset, sv, n)
    backward_sequence(model, cache, scratch, dataset, sv, n)
    adam_update_model(model, sv)


# Steps queued between waits for their losses (and the rows of one StepTable). The simulator runs
# every launch as it is made, a step in seconds: there each step's line prints as it finishes.
PRINT_EVERY = 1 if config.ENABLE_CUDASIM else 100


def step_batches(dataset, num_steps, batch=None):
    """(first step, token lists) of each batch of at most `batch` steps, built as they are asked for:
    step s trains on document s mod count, and only the documents the run reaches are tokenized."""
    batch = PRINT_EVERY if batch is None else batch
    doc_tokens = [tokenize_doc(dataset, doc) for doc in dataset.docs[:min(num_steps, len(dataset.docs))]]
    for first in range(0, num_steps, batch):
        count = min(batch, num_steps - first)
        yield first, [doc_tokens[(first + i) % len(doc_tokens)] for i in range(count)]


def train_batches(model, cache, scratch, dataset, num_steps):
    """main's loop: step s trains on document s mod count. Yields the steps' mean losses, a list per
    batch, as the queued steps finish (graphs.py). Each batch of PRINT_EVERY steps has its own
    StepTable, built while the previous batch runs, and reuses StepGraphs' slots 0..PRINT_EVERY-1, so
    memory is bounded whatever num_steps is."""
    sv, graphs = StepValues(), StepGraphs(min(num_steps, PRINT_EVERY))
    batches = step_batches(dataset, num_steps, PRINT_EVERY)
    first, token_lists = next(batches)
    table = StepTable(token_lists, num_steps, first)
    while True:
        for slot, tokens in enumerate(token_lists):
            n = trained_positions(len(tokens))
            graphs.step(sv, table, slot, n, lambda: train_step(model, cache, scratch, dataset, sv, n))
        upcoming = next(batches, None)  # prepared on the host while the queued steps run
        next_table = None if upcoming is None else StepTable(upcoming[1], num_steps, upcoming[0])
        graphs.wait()
        yield [sequence_loss(graphs.target_probs[slot], trained_positions(len(tokens)))
               for slot, tokens in enumerate(token_lists)]
        if upcoming is None:
            break
        (first, token_lists), table = upcoming, next_table


def train(model, cache, scratch, dataset, num_steps):
    """train_batches' losses one step at a time."""
    for losses in train_batches(model, cache, scratch, dataset, num_steps):
        yield from losses
