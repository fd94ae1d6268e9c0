"""Calibrated replaced-token probabilities: what `/v1/detect` and `electric eval detect` return.

A discriminator's output s_t is not a probability for every objective. ELECTRA trains sigma(s_t) as
one, but only for text corrupted at its pretraining rate; Electric's s_t is an energy (-log p̂(x_t | x\\t),
the replaced logit needs the generator's log q too), so sigma(s_t) sits near 1 for almost every token.

`electric export` therefore fits Platt scaling on a held-out slice of text that the model's own
generator corrupts the way pretraining does (`mask_prob` of the tokens replaced by its samples; a sample
equal to the original counts as original):

    p_t = sigma(scale * s_t + bias)    # P(token t was replaced | the text)

and stores `scale` and `bias` in the manifest (`calibration`, see `electric.export.calibration.fit_calibration`). The probability
means: of the tokens given p ~ 0.7, about 70% were replaced, for text corrupted at that rate. Its
threshold 0.5 ("more likely replaced than not") means the same for ELECTRA and Electric; on other
kinds of error (e.g. learners' grammatical errors) the ranking carries over, the base rate does not.
A model without a calibration (exported before it existed, or without a generator) returns sigma(s_t).

Applying a calibration needs NumPy only (this module); fitting it at export time needs torch
(`electric.export.calibration`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from electric.checkpoint import ExportManifest

RAW = "raw sigma(s_t)"  # how an uncalibrated model's probabilities are described to users


@dataclass(frozen=True)
class Calibration:
    """p_t = sigma(scale * s_t + bias): the affine map of the discriminator's logit to a replaced logit."""

    scale: float
    bias: float

    def logits(self, s: np.ndarray) -> np.ndarray:
        return self.scale * np.asarray(s, dtype=np.float64) + self.bias

    @classmethod
    def from_manifest(cls, manifest: ExportManifest) -> Calibration | None:
        """The manifest's calibration; None when it has none (exported before calibration, or uncalibrated)."""
        c = manifest.calibration
        if not c:
            return None
        try:
            return cls(float(c["scale"]), float(c["bias"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"manifest calibration {c!r} lacks a numeric scale and bias") from e


def replaced_logits(s: np.ndarray, calibration: Calibration | None) -> np.ndarray:
    """The logit of "replaced" for discriminator outputs s: calibrated when there is a calibration, else s."""
    s = np.asarray(s, dtype=np.float64)
    return s if calibration is None else calibration.logits(s)


def replaced_probs(s: np.ndarray, calibration: Calibration | None) -> np.ndarray:
    """P(replaced) per token: sigma of `replaced_logits` (stable for large |s|)."""
    return 0.5 * (1.0 + np.tanh(0.5 * replaced_logits(s, calibration)))


def describe(calibration: Calibration | None) -> str:
    if calibration is None:
        return (f"{RAW}: uncalibrated (no calibration in this model's electric.json: a torch checkpoint, or exported "
                "before calibration or without a generator); thresholds are not probabilities")
    return f"calibrated at export: sigma({calibration.scale:.4g} * s_t + {calibration.bias:.4g})"
