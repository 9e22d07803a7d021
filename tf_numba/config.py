"""tf.c's #defines for the model's shape (tf_d_vocab, tf_d_seq, tf_d_model, tf_n_heads, tf_n_layers;
tf_d_k = d_model / n_heads), read here from the weights instead, and main's training length."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    d_vocab: int
    d_seq: int
    d_model: int
    n_heads: int
    n_layers: int

    @property
    def d_k(self):
        return self.d_model // self.n_heads


GPT2 = Config(d_vocab=50257, d_seq=1024, d_model=768, n_heads=12, n_layers=12)
TINY = Config(d_vocab=96, d_seq=32, d_model=64, n_heads=4, n_layers=2)
# tf.c's training step: the first 65 tokens of assets/data, 64 inputs and 64 targets.
INPUT_SIZE = 64
