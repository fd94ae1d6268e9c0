"""Electric's two-tower cloze noise model, `ElectricForClozeLM`: the one module transformers lacks.

It reuses transformers' ELECTRA embeddings and layers and keeps their parameter names, so `save_pretrained` /
`from_pretrained` round-trip; importing this module registers it with transformers' Auto classes (model type
"electric-cloze"), which reading its directory's config.json needs. Pretraining trains it
(`electric.pretraining.modeling.PretrainingModel`); inference and export run it (`electric.inference.cloze`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModelForMaskedLM, ElectraConfig
from transformers.activations import get_activation
from transformers.models.electra.modeling_electra import (
    ElectraEmbeddings,
    ElectraEncoder,
    ElectraPreTrainedModel,
)


class ElectricClozeConfig(ElectraConfig):
    """Config of the two-tower cloze model: an ELECTRA config whose layers are causal towers."""

    model_type = "electric-cloze"


class ElectricClozeHead(nn.Module):
    """[LTR state at t-1 ; RTL state at t+1] -> dense(2H -> E, GELU) -> LayerNorm(E)."""

    def __init__(self, config: ElectricClozeConfig):
        super().__init__()
        self.dense = nn.Linear(2 * config.hidden_size, config.embedding_size)
        self.activation = get_activation("gelu")
        self.LayerNorm = nn.LayerNorm(config.embedding_size, eps=config.layer_norm_eps)

    def forward(self, ltr: torch.Tensor, rtl: torch.Tensor) -> torch.Tensor:
        # ltr, rtl: (B, T, H). Shift so that position t never sees x_t.
        left = F.pad(ltr[:, :-1], (0, 0, 1, 0))  # (B, T, H): LTR state at t-1, zeros at t=0
        right = F.pad(rtl[:, 1:], (0, 0, 0, 1))  # (B, T, H): RTL state at t+1, zeros at t=T-1
        return self.LayerNorm(self.activation(self.dense(torch.cat([left, right], dim=-1))))  # (B, T, E)


def _tower_mask(attention_mask: torch.Tensor, left_to_right: bool) -> torch.Tensor:
    """Boolean (B, 1, T, T) mask, True = may attend: causal (or anti-causal) and not padding.

    Every query may attend to itself, so rows of padding queries are never empty (an empty row
    would give NaN in SDPA and leak into later layers through 0 * NaN).
    """
    T = attention_mask.shape[1]
    idx = torch.arange(T, device=attention_mask.device)
    order = idx[None, :] <= idx[:, None] if left_to_right else idx[None, :] >= idx[:, None]  # (T, T) [q, k]
    allowed = order[None] & attention_mask.bool()[:, None, :]  # (B, T, T)
    allowed = allowed | (idx[:, None] == idx[None, :])[None]  # the diagonal (no bool eye: ONNX-exportable)
    return allowed[:, None]  # (B, 1, T, T)


class ElectricForClozeLM(ElectraPreTrainedModel):
    """Two causal transformers over the clean input, one left-to-right and one right-to-left.

    Position t uses the LTR state at t-1 and the RTL state at t+1, so q(. | x_{\\t}) never sees x_t.
    The output layer is tied to the word embeddings (which pretraining shares with the discriminator).
    """

    config_class = ElectricClozeConfig
    base_model_prefix = "electric"
    _tied_weights_keys = {"lm_head.weight": "embeddings.word_embeddings.weight"}

    def __init__(self, config: ElectricClozeConfig):
        super().__init__(config)
        config._attn_implementation = "sdpa"  # our boolean tower masks need SDPA semantics
        self.embeddings = ElectraEmbeddings(config)
        if config.embedding_size != config.hidden_size:
            self.embeddings_project = nn.Linear(config.embedding_size, config.hidden_size)
        self.ltr = ElectraEncoder(config)
        self.rtl = ElectraEncoder(config)
        self.cloze_head = ElectricClozeHead(config)
        self.lm_head = nn.Linear(config.embedding_size, config.vocab_size)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Module) -> None:
        if not isinstance(value, nn.Embedding):  # transformers' signature takes any module; ours is an embedding
            raise TypeError(f"the cloze model's input embeddings are an nn.Embedding, not a {type(value).__name__}")
        self.embeddings.word_embeddings = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    def cloze_hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                     word_embeddings: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T) ids -> (B, T, E) features for the vocabulary head, position t blind to x_t. `word_embeddings`
        (V, E) replaces the module's own word embedding table (pretraining's GDES)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        words = None if word_embeddings is None else F.embedding(input_ids, word_embeddings)  # (B, T, E)
        h = self.embeddings(input_ids=None if words is not None else input_ids, inputs_embeds=words)  # (B, T, E)
        if hasattr(self, "embeddings_project"):
            h = self.embeddings_project(h)  # (B, T, H)
        real = attention_mask[..., None].to(h.dtype)  # (B, T, 1): padding contributes zeros, like the edges
        ltr = self.ltr(h, attention_mask=_tower_mask(attention_mask, True)).last_hidden_state * real  # (B, T, H)
        rtl = self.rtl(h, attention_mask=_tower_mask(attention_mask, False)).last_hidden_state * real  # (B, T, H)
        return self.cloze_head(ltr, rtl)  # (B, T, E)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **_) -> torch.Tensor:
        """Logits of q(x_t = v | x_{\\t}) at every position: (B, T, V)."""
        return self.lm_head(self.cloze_hidden(input_ids, attention_mask))


AutoConfig.register(ElectricClozeConfig.model_type, ElectricClozeConfig)
AutoModelForMaskedLM.register(ElectricClozeConfig, ElectricForClozeLM)
