"""An independent float64 numpy implementation of microgpt's model, for the CPU tests.

Written from the model's math (whole-sequence matrices, causal mask, hand-derived backward),
not from the kernels, so agreement means the kernels compute the model and not just themselves.
"""
import numpy as np

N_EMBD, N_HEAD, BLOCK_SIZE = 16, 4, 16
HEAD_DIM = N_EMBD // N_HEAD
RMS_EPS = 1e-5


def rmsnorm(x):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + RMS_EPS)


def rmsnorm_back(x, gy):
    s = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + RMS_EPS)
    return gy * s - x * np.sum(gy * x, axis=-1, keepdims=True) * s**3 / x.shape[-1]


def softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def forward(w, inputs, temperature=1.0):
    """Activations for positions 0..T-1 given token ids; w maps param names to float64 matrices."""
    T = len(inputs)
    a = {"E": w["wte"][inputs] + w["wpe"][:T]}
    a["X0"] = rmsnorm(a["E"])
    a["A"] = rmsnorm(a["X0"])
    a["Q"], a["K"], a["V"] = (a["A"] @ w[name].T for name in ("attn_wq", "attn_wk", "attn_wv"))
    causal = np.tril(np.ones((T, T), dtype=bool))
    a["P"] = np.empty((N_HEAD, T, T))
    a["O"] = np.empty((T, N_EMBD))
    for h in range(N_HEAD):
        hs = slice(h * HEAD_DIM, (h + 1) * HEAD_DIM)
        s = np.where(causal, a["Q"][:, hs] @ a["K"][:, hs].T / np.sqrt(HEAD_DIM), -np.inf)
        a["P"][h] = softmax(s)
        a["O"][:, hs] = a["P"][h] @ a["V"][:, hs]
    a["M"] = a["O"] @ w["attn_wo"].T + a["X0"]
    a["Mn"] = rmsnorm(a["M"])
    a["F1"] = a["Mn"] @ w["mlp_fc1"].T
    a["R"] = np.maximum(a["F1"], 0.0)
    a["Xo"] = a["R"] @ w["mlp_fc2"].T + a["M"]
    a["probs"] = softmax(a["Xo"] @ w["lm_head"].T / temperature)
    return a


def loss_and_grads(w, tokens, n):
    """Mean cross-entropy of predicting tokens[1..n] from tokens[0..n-1], and d loss / d every param."""
    inputs, targets = np.asarray(tokens[:n]), np.asarray(tokens[1:n + 1])
    a = forward(w, inputs)
    loss = -np.mean(np.log(a["probs"][np.arange(n), targets]))

    g = {}
    dlogits = a["probs"].copy()
    dlogits[np.arange(n), targets] -= 1.0
    dlogits /= n
    g["lm_head"] = dlogits.T @ a["Xo"]
    dXo = dlogits @ w["lm_head"]
    g["mlp_fc2"] = dXo.T @ a["R"]
    dF1 = (dXo @ w["mlp_fc2"]) * (a["F1"] > 0)
    g["mlp_fc1"] = dF1.T @ a["Mn"]
    dM = dXo + rmsnorm_back(a["M"], dF1 @ w["mlp_fc1"])
    g["attn_wo"] = dM.T @ a["O"]
    dO = dM @ w["attn_wo"]
    dQ, dK, dV = np.zeros_like(a["Q"]), np.zeros_like(a["K"]), np.zeros_like(a["V"])
    for h in range(N_HEAD):
        hs = slice(h * HEAD_DIM, (h + 1) * HEAD_DIM)
        P = a["P"][h]
        dP = dO[:, hs] @ a["V"][:, hs].T
        dV[:, hs] = P.T @ dO[:, hs]
        dS = P * (dP - np.sum(dP * P, axis=1, keepdims=True)) / np.sqrt(HEAD_DIM)
        dQ[:, hs] = dS @ a["K"][:, hs]
        dK[:, hs] = dS.T @ a["Q"][:, hs]
    g["attn_wq"], g["attn_wk"], g["attn_wv"] = dQ.T @ a["A"], dK.T @ a["A"], dV.T @ a["A"]
    dA = dQ @ w["attn_wq"] + dK @ w["attn_wk"] + dV @ w["attn_wv"]
    dX0 = dM + rmsnorm_back(a["X0"], dA)
    dE = rmsnorm_back(a["E"], dX0)
    g["wte"] = np.zeros_like(w["wte"])
    np.add.at(g["wte"], inputs, dE)
    g["wpe"] = np.zeros_like(w["wpe"])
    g["wpe"][:n] = dE
    return loss, g


def adam(data, grad, m, v, step, total_steps, lr=0.01, beta1=0.85, beta2=0.99, eps=1e-8):
    """One Adam step with bias correction and the linearly decaying learning rate."""
    lr_t = lr * (1.0 - step / total_steps)
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad * grad
    m_hat = m / (1 - beta1 ** (step + 1))
    v_hat = v / (1 - beta2 ** (step + 1))
    return data - lr_t * m_hat / (np.sqrt(v_hat) + eps), m, v
