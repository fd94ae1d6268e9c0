"""Electric's cloze model at inference (torch): log q(x_t | x_not_t) of every input token in ONE pass.

The two-tower cloze model (`electric.pretraining.modeling.ElectricForClozeLM`, an Electric run's RUN/generator)
reads position t from the left-to-right state at t-1 and the right-to-left state at t+1, so its distribution at t
never sees x_t. Gathered at the input token, its log-softmax is a bidirectional pseudo-log-likelihood term, for all
positions at once (masked-LM PLL needs one pass per token):

    lp = ClozeTokenLogProbs(model)(input_ids, attention_mask)   # (B, T), no (B, T, V) leaves the module

The torch backend (`electric.inference.backend.TorchBackend`, kind "cloze") and the ONNX export's graph
(`electric.export.graph`) both run `ClozeTokenLogProbs`, so the runtime never sees the vocabulary axis.
Post-processing is `electric.inference.scoring.cloze_score`, the same tail as every other method.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

# the one home of its forward pass; importing it also registers the model with transformers' Auto classes, which
# reading its directory's config.json (the tokenizer does) needs
from electric.modeling.cloze import ElectricForClozeLM
from electric.modeling.loading import load_model


def input_token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[b, t, input_ids[b, t]]: (B, T, V) logits and (B, T) ids -> (B, T), in fp32.

    Computed as the gathered logit minus the log-normaliser, so the (B, T, V) log-softmax is never materialised."""
    if logits.dim() != 3 or logits.shape[:2] != input_ids.shape:
        raise ValueError(f"logits {tuple(logits.shape)} must be (B, T, V) over input_ids {tuple(input_ids.shape)}")
    logits = logits.float()
    picked = logits.gather(-1, input_ids.unsqueeze(-1)).squeeze(-1)  # (B, T)
    return picked - torch.logsumexp(logits, dim=-1)  # (B, T)


class ClozeTokenLogProbs(nn.Module):
    """A cloze model with the graph's signature: (input_ids, attention_mask) -> (B, T) log q(x_t | x_not_t)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:  # each (B, T) int64
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask)  # (B, T, V)
        return input_token_logprobs(logits, input_ids)  # (B, T)


def load_cloze_model(model_dir: str | Path, dtype: torch.dtype = torch.float32) -> nn.Module:
    """The `ElectricForClozeLM` saved in `model_dir` (eval mode, on the CPU)."""
    return load_model(model_dir, ElectricForClozeLM, dtype)
