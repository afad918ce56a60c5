"""The paper's formulas in plain NumPy, written independently of tfformer.

Every function takes weights as arrays and follows the equations of
"Attention Is All You Need" (and its BERT/GPT/ViT variants) literally, one
head at a time where that is the clearest form.
"""

import math

import numpy as np


def softmax(x, axis=-1):
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def layer_norm(x, gamma, beta, epsilon):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon) * gamma + beta


def gelu(x):
    # The exact (erf) form, Keras's default.
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def gelu_tanh(x):
    # GPT-2's tanh approximation ("gelu_new").
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def relu(x):
    return np.maximum(x, 0.0)


def silu(x):
    """x * sigmoid(x) (the "swish" of SwiGLU)."""
    return x / (1.0 + np.exp(-x))


def rms_norm(x, gamma, epsilon):
    """x / sqrt(mean(x^2) + eps) * gamma (Zhang and Sennrich 2019)."""
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + epsilon) * gamma


def swiglu(x, w_gate, w_up, w_down):
    """(SiLU(x W_gate) * (x W_up)) W_down, no biases (Shazeer 2020; Llama)."""
    return (silu(x @ w_gate) * (x @ w_up)) @ w_down


def feed_forward(x, w1, b1, w2, b2, activation=relu):
    """FFN(x) = act(x W1 + b1) W2 + b2 (section 3.3)."""
    return activation(x @ w1 + b1) @ w2 + b2


def attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d) + M) v for one head: q (T, d), k/v (S, d).

    `mask` (T, S) is True where attention is allowed; a row with no allowed key
    gets zero weights (Keras's convention).
    """
    scores = q @ k.T / math.sqrt(q.shape[-1])
    if mask is None:
        return softmax(scores) @ v, softmax(scores)
    scores = np.where(mask, scores, -np.inf)
    weights = np.zeros_like(scores)
    rows = mask.any(-1)
    weights[rows] = softmax(scores[rows])
    return weights @ v, weights


def multi_head_attention(
    x_q, x_kv, wq, bq, wk, bk, wv, bv, wo, bo, num_heads, mask=None, kv_heads=None
):
    """MultiHead(Q, K, V) = Concat(head_1..head_H) W^O for one example.

    Weights are dense matrices: wq (F, H*d), wk/wv (F, KV*d), wo (H*dv, out).
    Query head h uses key/value head h // (H / KV) (grouped-query attention;
    KV = H is the paper). `mask` (T, S) or None.
    """
    kv_heads = kv_heads or num_heads
    d = wq.shape[1] // num_heads
    dv = wv.shape[1] // kv_heads
    q, k, v = x_q @ wq + bq, x_kv @ wk + bk, x_kv @ wv + bv
    heads, weights = [], []
    for h in range(num_heads):
        g = h // (num_heads // kv_heads)
        out, w = attention(
            q[:, h * d : (h + 1) * d],
            k[:, g * d : (g + 1) * d],
            v[:, g * dv : (g + 1) * dv],
            mask,
        )
        heads.append(out)
        weights.append(w)
    return np.concatenate(heads, -1) @ wo + bo, np.stack(weights)


def causal(t, s=None):
    s = t if s is None else s
    return np.tril(np.ones((t, s), bool))


def sinusoidal_table(length, dim, start=0, max_wavelength=10000.0):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(same)."""
    table = np.zeros((length, dim))
    for pos in range(length):
        for j in range(dim):
            i2 = j - j % 2
            angle = (start + pos) / max_wavelength ** (i2 / dim)
            table[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return table


def rotary(x, start=0, max_wavelength=10000.0):
    """Rotate-half RoPE of x (L, d): pair (i, i + d/2) turned by pos * theta_i."""
    length, dim = x.shape
    half = dim // 2
    out = np.empty_like(x)
    for pos in range(length):
        for i in range(half):
            theta = (start + pos) * max_wavelength ** (-2 * i / dim)
            a, b = x[pos, i], x[pos, i + half]
            out[pos, i] = a * math.cos(theta) - b * math.sin(theta)
            out[pos, i + half] = b * math.cos(theta) + a * math.sin(theta)
    return out
