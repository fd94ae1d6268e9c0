"""Pre-LayerNorm ELECTRA: each sublayer reads a normalised copy of the residual stream (x + f(LN(x))), and a last
LayerNorm closes the encoder. Cramming (Geiping & Goldstein) found it tolerates larger learning rates and shorter
warmup than BERT's post-LN (LN(x + f(x))), which is what transformers' ELECTRA is.

A pre-LN model is an ELECTRA model whose layers moved their LayerNorms, keeping their parameters and names:
`attention.output.LayerNorm` normalises the attention's input and `output.LayerNorm` the feed-forward's, and the
encoder gains `final_layer_norm`. Its config carries `layer_norm_position: "pre"`; `electra_model` builds one
and `electric.modeling.loading.load_model` loads one (every loader does). It is a training option
(`--layer-norm pre`) measured in the stabilisers' ladder (research/stabiliser_ladder); no transformers class loads it, so the
ONNX export and fine-tuning refuse such a checkpoint (`require_post_layer_norm`) rather than load it as the post-LN
network it is not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.models.electra.modeling_electra import ElectraEncoder, ElectraLayer

from electric.checkpoint import CheckpointError

ModelT = TypeVar("ModelT", bound=PreTrainedModel)


def is_pre_layer_norm(config: PretrainedConfig) -> bool:
    return getattr(config, "layer_norm_position", "post") == "pre"


def require_post_layer_norm(model_dir: str | Path, what: str) -> None:
    """Raise CheckpointError when `model_dir` holds a pre-LN checkpoint, which `what` cannot run."""
    config_file = Path(model_dir) / "config.json"
    if config_file.is_file() and json.loads(config_file.read_text()).get("layer_norm_position") == "pre":
        raise CheckpointError(f"{str(model_dir)!r} is a pre-LayerNorm checkpoint (pretrained with --layer-norm pre), "
                         f"which {what} does not support; pretrain with the default --layer-norm post")


class PreLayerNormLayer(ElectraLayer):
    """h = x + attention(LN_a(x)); out = h + FFN(LN_f(h)), with ELECTRA's parameters (self-attention only)."""

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, *_, **kwargs):
        kwargs.pop("encoder_attention_mask", None)
        kwargs.pop("cache", None)
        attn = self.attention
        context, _ = attn.self(attn.output.LayerNorm(hidden_states), attention_mask=attention_mask, **kwargs)
        h = hidden_states + attn.output.dropout(attn.output.dense(context))
        ffn = self.output.dense(self.intermediate(self.output.LayerNorm(h)))
        return h + self.output.dropout(ffn)


class PreLayerNormEncoder(ElectraEncoder):
    """ELECTRA's encoder with pre-LN layers and a LayerNorm on its output."""

    def __init__(self, config: PretrainedConfig):
        super().__init__(config)
        self.layer = nn.ModuleList([PreLayerNormLayer(config, layer_idx=i) for i in range(config.num_hidden_layers)])
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        out = super().forward(hidden_states, *args, **kwargs)
        out.last_hidden_state = self.final_layer_norm(out.last_hidden_state)
        return out


def electra_model(cls: type[ModelT], config: PretrainedConfig) -> ModelT:
    """`cls(config)` (an ELECTRA class with `.electra`), its encoder pre-LN when the config says so."""
    model = cls(config)
    if is_pre_layer_norm(config):
        encoder = PreLayerNormEncoder(config)
        model.get_submodule("electra").encoder = encoder
        encoder.apply(model._init_weights)
    return model


def load_pre_layer_norm(cls: type[ModelT], model_dir: str | Path, config: PretrainedConfig) -> ModelT:
    """The pre-LN checkpoint in `model_dir` as `cls` built pre-LN (`electric.modeling.loading.load_model` calls it)."""
    from safetensors.torch import load_file

    model = electra_model(cls, config)
    state = load_file(str(Path(model_dir) / "model.safetensors"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith(("position_ids", "lm_head.weight"))]  # the head is tied
    if missing or unexpected:
        raise ValueError(f"{str(model_dir)!r}: pre-LN checkpoint does not fit {cls.__name__}: missing {missing}, "
                         f"unexpected {unexpected}")
    model.tie_weights()
    return model.eval()
