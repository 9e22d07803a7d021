"""microgpt.cu's #defines. Float constants are float32 so kernels stay in single precision."""
import numpy as np

N_LAYER = 1
N_EMBD = 16
BLOCK_SIZE = 16
N_HEAD = 4
HEAD_DIM = N_EMBD // N_HEAD
MLP_HIDDEN = 4 * N_EMBD
INIT_STD = np.float32(0.08)
RMS_EPS = np.float32(1e-5)
LEARNING_RATE = np.float32(0.01)
BETA1 = np.float32(0.85)
BETA2 = np.float32(0.99)
ADAM_EPS = np.float32(1e-8)
