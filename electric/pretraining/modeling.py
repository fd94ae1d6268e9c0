"""The pretraining wrapper: a discriminator and its generator (sharing their embeddings unless the config says
otherwise), and one objective's forward pass over a batch (`PretrainingModel`: mlm, electra or electric), plus the
discriminator's pass over fixed-noise inputs that training health measures.

The networks themselves live in `electric.modeling`: the discriminator is transformers' `ElectraForPreTraining`,
the ELECTRA generator `ElectraForMaskedLM`, Electric's noise model `electric.modeling.cloze.ElectricForClozeLM`,
and `electric.modeling.pre_layer_norm` builds any of them pre-LayerNorm. How a batch is corrupted (the chosen
positions, the generator's replacements, the labels) is `electric.modeling.corruption`; the losses are `objectives`.

A step is written for a GPU that never waits on the host: its random numbers, the sampling temperature included,
are drawn before it (`draw_noise`, into one `Noise` of tensors); `forward` then runs on fixed shapes (the
chosen positions as `chosen_slots`, every mean a weighted sum), reads nothing back and reads no Python number that
changes between steps, so it compiles to one graph that a new temperature never recompiles
(tests/test_step_on_device.py).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining, PreTrainedModel

from electric.modeling.cloze import ElectricClozeConfig, ElectricForClozeLM
from electric.modeling.corruption import (
    Corruption,
    Noise,
    bert_mask_inputs,
    candidate_mask,
    chosen_slots,
    corrupt,
    draw_noise,
    electra_labels,
    electric_labels,
    key_mask,
    mask_tokens,
    masked_lm_logits,
)
from electric.modeling.pre_layer_norm import electra_model
from electric.pretraining import objectives as obj
from electric.pretraining.config import PretrainConfig


def _electra_config(cfg: PretrainConfig, vocab_size: int, pad_token_id: int, *, generator: bool) -> dict:
    hidden = cfg.gen_hidden if generator else cfg.hidden_size
    pre_ln = {"layer_norm_position": "pre"} if cfg.layer_norm == "pre" else {}  # the cloze model drops it
    return dict(
        **pre_ln,
        vocab_size=vocab_size,
        embedding_size=cfg.embedding_size,
        hidden_size=hidden,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.gen_heads if generator else cfg.num_attention_heads,
        intermediate_size=cfg.gen_intermediate if generator else cfg.intermediate_size,
        max_position_embeddings=cfg.position_table,
        type_vocab_size=cfg.type_vocab_size,
        hidden_dropout_prob=cfg.hidden_dropout_prob,
        attention_probs_dropout_prob=cfg.attention_probs_dropout_prob,
        pad_token_id=pad_token_id,
        tie_word_embeddings=True,
    )


@torch.no_grad()
def _details(disc_logits, disc_output, labels, attention_mask, hidden, gen_logits, gen_targets) -> dict:
    """The per-token tensors of one batch that electric.pretraining.health measures, detached."""
    d = {"disc_logits": disc_logits, "disc_output": disc_output, "labels": labels,
         "attention_mask": attention_mask, "hidden": hidden}
    d = {k: (v.detach() if v is not None else None) for k, v in d.items()}
    if gen_logits is not None:
        d["gen_nll"] = F.cross_entropy(gen_logits.float(), gen_targets, reduction="none")  # (N,)
        d["gen_targets"] = gen_targets
    return d


def _use_sdpa(*models: PreTrainedModel) -> None:
    """Attention through torch's scaled_dot_product_attention (flash or memory-efficient kernels on a GPU), which
    the boolean masks of `key_mask` and the cloze towers are written for."""
    for model in models:
        if model.config._attn_implementation != "sdpa":
            model.set_attn_implementation("sdpa")


@dataclass
class SpecialIds:
    pad: int
    mask: int
    cls: int
    sep: int
    vocab_size: int
    all_special: tuple[int, ...]

    @classmethod
    def from_tokenizer(cls, tok) -> SpecialIds:
        return cls(tok.pad_token_id, tok.mask_token_id, tok.cls_token_id, tok.sep_token_id, len(tok),
                   tuple(tok.all_special_ids))


class PretrainingModel(nn.Module):
    """Discriminator + generator; `forward` runs one objective on a batch.

    objective mlm: `discriminator` is None and `generator` is a full-size `ElectraForMaskedLM`.
    objective electra: `generator` is an `ElectraForMaskedLM` of generator_hidden_size (default 1/4 width).
    objective electric: `generator` is an `ElectricForClozeLM` of generator_hidden_size (default 1/4 width).
    The two share their embeddings (`share_embeddings`) unless embedding_sharing is separate or gdes, or the
    generator is frozen.
    """

    special_ids: torch.Tensor  # (S,) the special tokens' ids: a buffer, never chosen for replacement
    discriminator: ElectraForPreTraining | None
    generator: ElectraForMaskedLM | ElectricForClozeLM

    def __init__(
        self,
        cfg: PretrainConfig,
        special: SpecialIds,
        discriminator: ElectraForPreTraining | None = None,
        generator: ElectraForMaskedLM | ElectricForClozeLM | None = None,
    ):
        super().__init__()
        self.cfg = cfg
        self.special = special
        self.register_buffer("special_ids", torch.tensor(special.all_special, dtype=torch.long), persistent=False)
        V, pad = special.vocab_size, special.pad
        if cfg.objective == "mlm":
            self.discriminator = None
            self.generator = generator or electra_model(
                ElectraForMaskedLM, ElectraConfig(**_electra_config(cfg, V, pad, generator=False)))
            _use_sdpa(self.generator)
            return
        if discriminator is None:
            discriminator = electra_model(ElectraForPreTraining,
                                          ElectraConfig(**_electra_config(cfg, V, pad, generator=False)))
            if cfg.disc_bias_init == "prior":  # first logits at the label prior (a zero bias can collapse it)
                with torch.no_grad():
                    discriminator.discriminator_predictions.dense_prediction.bias.fill_(
                        obj.disc_output_bias(cfg.objective, cfg.mask_prob, V))
        self.discriminator = discriminator
        if generator is None:
            gen_kwargs = _electra_config(cfg, V, pad, generator=True)
            if cfg.objective == "electra":
                generator = electra_model(ElectraForMaskedLM, ElectraConfig(**gen_kwargs))
            else:  # the cloze towers stay post-LN
                gen_kwargs.pop("layer_norm_position", None)
                generator = ElectricForClozeLM(ElectricClozeConfig(**gen_kwargs))
        self.generator = generator
        _use_sdpa(discriminator, generator)
        if self.gdes:  # the generator's word embeddings: stopgrad(the discriminator's) + this delta
            E = discriminator.config.embedding_size
            self.gdes_delta = nn.Parameter(torch.zeros(V, E))
            self._generator_word_embeddings().requires_grad_(False)  # unused while training; written at save
        if self.frozen_generator:  # a fixed, pretrained sampler (Fast-ELECTRA): no gradient, no shared weights
            generator.requires_grad_(False)
            generator.eval()
        self.share_embeddings()

    @property
    def frozen_generator(self) -> bool:
        return self.cfg.generator_mode == "frozen" and self.discriminator is not None

    @property
    def gdes(self) -> bool:
        return self.cfg.embedding_sharing == "gdes" and self.discriminator is not None

    @property
    def masked_lm(self) -> ElectraForMaskedLM:
        """The generator of objectives mlm and electra: a masked LM."""
        assert isinstance(self.generator, ElectraForMaskedLM), f"objective {self.cfg.objective} has a cloze model"
        return self.generator

    @property
    def cloze(self) -> ElectricForClozeLM:
        """The generator of objective electric: the two-tower cloze model."""
        assert isinstance(self.generator, ElectricForClozeLM), f"objective {self.cfg.objective} has a masked LM"
        return self.generator

    def _generator_word_embeddings(self) -> torch.Tensor:
        g = self.generator
        return (g.embeddings if isinstance(g, ElectricForClozeLM) else g.electra.embeddings).word_embeddings.weight

    def generator_word_weight(self) -> torch.Tensor | None:
        """GDES: the generator's word embeddings (V, E), stopgrad(the discriminator's) + its own delta; else None
        (the generator uses its own module's, shared or not)."""
        return self._gdes_word_weight() if self.gdes else None

    def _gdes_word_weight(self) -> torch.Tensor:
        assert self.discriminator is not None  # gdes implies a discriminator
        return self.discriminator.electra.embeddings.word_embeddings.weight.detach() + self.gdes_delta

    @torch.no_grad()
    def materialize_generator_embeddings(self) -> None:
        """GDES: write the generator's effective word embeddings into its own module (and so its tied output
        layer), so that its saved directory is a plain transformers model."""
        if self.gdes:
            self._generator_word_embeddings().copy_(self._gdes_word_weight())

    def train(self, mode: bool = True) -> PretrainingModel:
        super().train(mode)
        if self.frozen_generator:
            self.generator.eval()
        return self

    def share_embeddings(self) -> None:
        """Word, position, token-type embeddings and their LayerNorm are one module in both networks;
        the generator's output layer is tied to the shared word embeddings. A frozen generator keeps its own, and
        so does one with embedding_sharing separate or gdes."""
        if self.discriminator is None or self.frozen_generator or self.cfg.embedding_sharing != "shared":
            return
        shared = self.discriminator.electra.embeddings
        if isinstance(self.generator, ElectricForClozeLM):
            self.generator.embeddings = shared
            self.generator.lm_head.weight = shared.word_embeddings.weight
        else:
            self.generator.electra.embeddings = shared
            self.generator.generator_lm_head.weight = shared.word_embeddings.weight

    @property
    def tempered(self) -> bool:
        """Whether any step of this config samples at a temperature other than 1: only then does Electric's log q
        of the noise need its own softmax (`objectives.cloze_log_q`). Fixed for the run, so never a recompile."""
        return self.cfg.temperature != 1.0 or self.cfg.temperature_start not in (0.0, 1.0)

    # ---- the three objectives -------------------------------------------------------------------

    def draw_noise(self, input_ids: torch.Tensor, rng: torch.Generator, temperature: float | None = None) -> Noise:
        """The random draws of one step on the (B, T) batch `input_ids`, from `rng`, with the temperature its
        samples are drawn at (the loop's schedule gives it; None: the config's `temperature`)."""
        temperature = self.cfg.temperature if temperature is None else temperature
        if temperature != 1.0 and not self.tempered:
            raise ValueError(f"temperature {temperature}: this config samples at 1 throughout (temperature "
                             f"{self.cfg.temperature}, temperature_start {self.cfg.temperature_start})")
        return draw_noise(rng, input_ids.shape, objective=self.cfg.objective, vocab_size=self.special.vocab_size,
                          max_predictions=self.cfg.max_predictions, temperature=temperature)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, noise: Noise,
                details: bool = False) -> dict:
        """One objective's pass over a (B, T) batch with the step's draws `noise` (`draw_noise`): the step is a
        function of the batch and those tensors alone, so it compiles to one graph whatever the temperature
        schedule does. Returns {"loss": scalar, metric name: detached scalar}.

        details=True adds "details": the per-token tensors that training health is measured from
        (electric.pretraining.health.health_metrics): disc_logits (the logit the loss sees; Electric's is corrected),
        disc_output (the discriminator's own output), labels, attention_mask, hidden (the last layer of
        the discriminator, or of the MLM encoder), gen_nll and gen_targets (generator NLL per predicted token).
        """
        if input_ids.shape != attention_mask.shape or input_ids.dim() != 2:
            raise ValueError(f"input_ids {tuple(input_ids.shape)} and attention_mask "
                             f"{tuple(attention_mask.shape)} must both be (B, T)")
        if self.cfg.objective == "mlm":
            return self._mlm(input_ids, attention_mask, noise, details)
        if self.cfg.objective == "electra":
            return self._electra(input_ids, attention_mask, noise, details)
        return self._electric(input_ids, attention_mask, noise, details)

    def _corrupt(self, input_ids, attention_mask, noise: Noise) -> Corruption:
        """The generator's pass (`corrupt`, as export's calibration runs it); without gradient for a frozen
        generator."""
        with torch.no_grad() if self.frozen_generator else contextlib.nullcontext():
            return corrupt(self.generator, input_ids, attention_mask, self.special_ids, noise,
                           mask_prob=self.cfg.mask_prob, max_predictions=self.cfg.max_predictions,
                           mask_id=self.special.mask, words=self.generator_word_weight())

    def _discriminate(self, disc_inputs, attention_mask, details: bool):
        """Discriminator outputs s (B, T), and its last layer (B, T, H) when details are asked for."""
        assert self.discriminator is not None  # objectives electra and electric have one
        out = self.discriminator(disc_inputs, attention_mask=key_mask(attention_mask), output_hidden_states=details)
        return out.logits, (out.hidden_states[-1] if details else None)

    # Every shape in a step is fixed by the batch's (B, T): the chosen positions are `chosen_slots`' B x S slots
    # (an unused one is False in `valid`), and every mean is a weighted sum. No value is read back to the host, so a
    # GPU never waits for the step to tell it what comes next.

    def _mlm(self, input_ids, attention_mask, noise: Noise, details=False) -> dict:
        s = self.special
        assert noise.show is not None and noise.swap_ids is not None  # drawn for objective mlm
        candidates = candidate_mask(input_ids, attention_mask, self.special_ids)  # (B, T)
        chosen = mask_tokens(candidates, self.cfg.mask_prob, self.cfg.max_predictions, noise.choose)  # (B, T)
        inputs = bert_mask_inputs(input_ids, chosen, s.mask, noise.show, noise.swap_ids)  # (B, T)
        index, valid = chosen_slots(chosen, self.cfg.max_predictions)  # (N,) each
        logits, h = masked_lm_logits(self.masked_lm, inputs, attention_mask, index)  # (N, V), (B, T, H)
        targets = input_ids.flatten()[index]  # (N,)
        loss = obj.mlm_loss(logits, targets, valid)
        out: dict[str, Any] = {"loss": loss, "gen_loss": loss.detach(),
                               "gen_acc": obj.accuracy(logits, targets, valid)}
        if details:
            out["details"] = _details(None, None, None, attention_mask, h, logits[valid], targets[valid])
        return out

    def _electra(self, input_ids, attention_mask, noise: Noise, details=False) -> dict:
        c = self._corrupt(input_ids, attention_mask, noise)
        targets = input_ids.flatten()[c.index]  # (N,)
        labels = electra_labels(input_ids, c.corrupted)  # (B, T)
        s, h = self._discriminate(c.corrupted, attention_mask, details)  # (B, T), (B, T, H) or None
        gen_weight = 0.0 if self.frozen_generator else self.cfg.gen_weight
        out = obj.electra_loss(c.logits, targets, c.valid, s, labels, attention_mask, gen_weight,
                               self.cfg.disc_weight)
        out["gen_acc"] = obj.accuracy(c.logits, targets, c.valid)
        if details:
            out["details"] = _details(s, s, labels, attention_mask, h, c.logits[c.valid], targets[c.valid])
        return out

    def _electric(self, input_ids, attention_mask, noise: Noise, details=False) -> dict:
        c = self._corrupt(input_ids, attention_mask, noise)
        assert c.products is not None  # a cloze model's pass
        labels = electric_labels(c.chosen)  # (B, T): every sampled position is "noise"
        # the correction's log q is the noise's: the distribution the replacements were drawn from, tempered when
        # the temperature is not 1 (the cloze model's own loss below keeps its untempered log q)
        target_log_q, noise_log_q, best = obj.cloze_log_q(
            c.products, self.cloze.lm_head.bias, input_ids.flatten(), c.corrupted.flatten(),
            noise.temperature if self.tempered else None)  # (B*T,) each
        target_log_q, noise_log_q, best = (t.view(input_ids.shape) for t in (target_log_q, noise_log_q, best))
        log_q = torch.where(attention_mask.bool(), noise_log_q, 0.0)  # (B, T)
        s, h = self._discriminate(c.corrupted, attention_mask, details)  # (B, T) energies, (B, T, H) or None
        logit = obj.electric_corrected_logits(s, log_q, self.cfg.mask_prob)  # (B, T)
        candidates = c.candidates
        out = obj.electric_loss(target_log_q, candidates, logit, labels, attention_mask, self.cfg.gen_weight,
                                self.cfg.disc_weight)
        with torch.no_grad():
            real = attention_mask.float()
            out["logit_mean"] = (logit * real).sum() / real.sum().clamp(min=1)  # where the corrected logits sit
            # the target reaches the row's maximum: its first choice (ties, rare in fp32, count as right)
            first = (candidates & (target_log_q >= best)).float()
            out["gen_acc"] = first.sum() / candidates.float().sum().clamp(min=1)
            if details:
                out["details"] = {**_details(logit, s, labels, attention_mask, h, None, None),
                                  "gen_nll": -target_log_q[candidates], "gen_targets": input_ids[candidates],
                                  "corrected": True}
        return out

    def fixed_noise_inputs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, noise_probs: torch.Tensor,
                           rng: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """`input_ids` (B, T) with the usual k positions replaced by draws from a fixed distribution `noise_probs`
        (V,) instead of the generator, and the labels (B, T), 1 = replaced."""
        candidates = candidate_mask(input_ids, attention_mask, self.special_ids)  # (B, T)
        u = torch.rand(input_ids.shape, generator=rng, device=input_ids.device)  # (B, T)
        chosen = mask_tokens(candidates, self.cfg.mask_prob, self.cfg.max_predictions, u)  # (B, T)
        draws = torch.multinomial(noise_probs, int(chosen.sum()), replacement=True, generator=rng)  # (k,)
        noisy = input_ids.clone()
        noisy[chosen] = draws
        return noisy, (noisy != input_ids).float()

    @torch.no_grad()
    def fixed_noise_scores(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, noise_probs: torch.Tensor,
                           rng: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """The discriminator's output s (B, T) on `fixed_noise_inputs`, and their labels (B, T), 1 = replaced.

        With unigram noise the replaced tokens have the same marginal as the originals, so only context tells
        them apart: a measure of the discriminator that does not move as its own generator improves.
        """
        if self.discriminator is None:
            raise ValueError("objective mlm has no discriminator")
        noisy, labels = self.fixed_noise_inputs(input_ids, attention_mask, noise_probs, rng)
        return self.discriminator(noisy, attention_mask=attention_mask).logits, labels

    # ---- checkpoints ----------------------------------------------------------------------------

    def save_pretrained(self, out_dir, tokenizer=None) -> dict[str, str]:
        """Write `discriminator/` and `generator/` transformers directories under out_dir."""
        written = {}
        for name, model in (("discriminator", self.discriminator), ("generator", self.generator)):
            if model is None:
                continue
            path = Path(out_dir) / name
            model.save_pretrained(path)
            if tokenizer is not None:
                tokenizer.save_pretrained(path)
            written[name] = str(path)
        return written
