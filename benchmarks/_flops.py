"""Matmul FLOPs of one pretraining token, per objective, as `electric.pretraining.modeling.PretrainingModel` runs
it: the numerator of MFU (model FLOPs utilisation) in bench_gpu_throughput.py.

Counted per real token of a sequence of T positions, forward and backward = 3 x forward (the backward computes
two matmuls per forward one: the gradient of the input and of the weight). A linear layer a -> b costs 2ab per
row; LayerNorm, GELU, softmax, dropout, embedding look-ups, the losses and the sampling are not matmuls and are
not counted (a few percent of a step's arithmetic, none of its FLOPs in this sense).

With H, I, L the discriminator's (or the MLM's) width, FFN width and depth, G = generator_hidden_size (default
H/4, FFN 4G, depth L), E the embedding width, V the vocabulary, T the sequence length and p = min(P, T) / T the
fraction of positions the vocabulary head runs at (each row's P = max_predictions = int((mask_prob + 0.005) x T)
slots for its chosen tokens, used or not: a fixed number, so the step's shapes never depend on the batch),
forward, per token:

    enc(h, i) = L (8h^2 + 4hi + 4Th)     # a layer: Q, K, V, output; FFN in and out; attention's QK^T and AV
    proj(h)   = 2Eh if E != h, else 0    # ELECTRA projects its embeddings to the encoder's width
    disc      = proj(H) + enc(H, I) + 2H^2 + 2H                  # every token; head dense H->H, then H->1
    mlm       = proj(H) + enc(H, I) + p (2HE + 2EV)              # the head (H->E, E->V) at chosen tokens only
    electra   = proj(G) + enc(G, 4G) + p (2GE + 2EV) + disc      # generator, its head at chosen tokens only
    electric  = proj(G) + 2 enc(G, 4G) + 2(2G)E + 2EV + disc     # two cloze towers (one projection) and the
                                                                 # cloze head (2G->E, E->V) at every token

and the training FLOPs of a token are 3x that. Attention is counted over all T positions (the towers' causal
masks do not skip the masked half: SDPA computes it).
"""

from __future__ import annotations

from electric.pretraining.config import PretrainConfig


def _linear(a: int, b: int) -> int:
    """Forward FLOPs of one row through a dense a -> b layer."""
    return 2 * a * b


def _encoder(hidden: int, intermediate: int, layers: int, seq_len: int) -> int:
    """Forward FLOPs per token of a transformer encoder's layers (no embedding projection)."""
    per_layer = 4 * _linear(hidden, hidden) + 2 * _linear(hidden, intermediate) + 2 * 2 * seq_len * hidden
    return layers * per_layer


def _projection(embedding: int, hidden: int) -> int:
    """ELECTRA projects its embeddings to the hidden width when they differ."""
    return _linear(embedding, hidden) if embedding != hidden else 0


def flops_per_token_parts(cfg: PretrainConfig, vocab_size: int, seq_len: int) -> dict[str, float]:
    """Forward + backward matmul FLOPs per token, by network: {"generator" (mlm: the masked LM; electric: the cloze
    model), "discriminator" (absent for mlm)} (the module docstring's formula)."""
    if vocab_size < 1 or seq_len < 1:
        raise ValueError(f"vocab_size {vocab_size} and seq_len {seq_len} must be >= 1")
    H, FFN, L, E, V, T, p = (cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.embedding_size,
                             vocab_size, seq_len, min(cfg.max_predictions, seq_len) / seq_len)
    G, GI = cfg.gen_hidden, cfg.gen_intermediate
    disc = _projection(E, H) + _encoder(H, FFN, L, T) + _linear(H, H) + _linear(H, 1)
    if cfg.objective == "mlm":
        forward = {"generator": _projection(E, H) + _encoder(H, FFN, L, T) + p * (_linear(H, E) + _linear(E, V))}
    elif cfg.objective == "electra":
        forward = {"generator": _projection(E, G) + _encoder(G, GI, L, T) + p * (_linear(G, E) + _linear(E, V)),
                   "discriminator": disc}
    elif cfg.objective == "electric":
        forward = {"generator": _projection(E, G) + 2 * _encoder(G, GI, L, T) + _linear(2 * G, E) + _linear(E, V),
                   "discriminator": disc}
    else:
        raise ValueError(f"unknown objective {cfg.objective!r}")
    return {k: 3.0 * v for k, v in forward.items()}


def flops_per_token(cfg: PretrainConfig, vocab_size: int, seq_len: int) -> float:
    """Forward + backward matmul FLOPs of one training token of `cfg`'s objective at this vocabulary and sequence
    length (`flops_per_token_parts`, summed)."""
    return sum(flops_per_token_parts(cfg, vocab_size, seq_len).values())
