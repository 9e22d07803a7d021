"""Sampling new documents from the trained model, one glibc rand_uniform draw per token."""
import numpy as np

from .constants import BLOCK_SIZE
from .glibc_rand import rand_uniform
from .launch import copy_to_host, launch_scaled_softmax
from .model import forward_position


def sample_from_probs(probs, n, gen):
    """The first id whose float32 running sum of probs reaches the draw; the last id if none does."""
    r = rand_uniform(gen)
    cumulative = np.float32(0.0)
    for i in range(n):
        cumulative += probs[i]
        if r <= cumulative:
            return i
    return n - 1


def sample_line(sample_idx, sample):
    return b"sample %2d: %s\n" % (sample_idx + 1, sample)


def generate_samples(model, cache, dataset, sv, num_samples, temperature, gen, out):
    host_probs = np.empty(dataset.vocab_size, dtype=np.float32)
    out.write(b"\n--- inference (new, hallucinated names) ---\n")
    inv_temperature = np.float32(1.0) / np.float32(temperature)
    for sample_idx in range(num_samples):
        token_id = dataset.bos_id
        sample = bytearray()
        for pos in range(BLOCK_SIZE):
            sv.set_token(pos, token_id)
            forward_position(model, cache, dataset.vocab_size, sv, pos)
            pc = cache.pos[pos]
            launch_scaled_softmax(pc.logits, pc.probs, inv_temperature, dataset.vocab_size)
            copy_to_host(host_probs, pc.probs)
            token_id = sample_from_probs(host_probs, dataset.vocab_size, gen)
            if token_id == dataset.bos_id:
                break
            sample.append(dataset.id_to_char[token_id])
        out.write(sample_line(sample_idx, bytes(sample)))
    out.flush()
