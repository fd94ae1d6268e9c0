"""A fixed seed's losses do not move when the training step is rewritten for speed.

`seeded_losses.json` holds the losses and metrics of three seeded fp32 optimizer steps of each objective on a
hand-made batch (rows of different lengths, one of a single candidate), computed by the step as it was written
before its GPU rewrite (fixed-size gathers in place of boolean indexing, no host syncs). A change that alters
what a step computes fails here; one that only reorders a sum stays within the tolerance.

    python tests/test_seeded_losses.py --write    # record the current step's values (say why in the commit)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from electric.pretraining.config import resolve_config  # noqa: E402
from electric.pretraining.modeling import PretrainingModel, SpecialIds  # noqa: E402

GOLDEN = Path(__file__).with_name("seeded_losses.json")
CASES = {"mlm": ("mlm", 1.0), "electra": ("electra", 1.0), "electric": ("electric", 1.0),
         "electric_t2": ("electric", 2.0)}
VOCAB, T = 300, 64
SPECIAL = SpecialIds(pad=0, mask=4, cls=2, sep=3, vocab_size=VOCAB, all_special=(0, 1, 2, 3, 4))
LENGTHS = (64, 64, 40, 3, 64, 17, 64, 52)  # one row per sequence of the batch: 3 = [CLS] one token [SEP]


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(5, VOCAB, (len(LENGTHS), T), generator=g)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(LENGTHS):
        ids[row, 0], ids[row, n - 1], ids[row, n:] = SPECIAL.cls, SPECIAL.sep, SPECIAL.pad
        mask[row, :n] = 1
    return ids, mask


def seeded_losses(objective: str, temperature: float, steps: int = 3) -> list[dict[str, float]]:
    """The returned scalars of `steps` seeded fp32 AdamW steps of the debug preset (dropout off)."""
    torch.manual_seed(0)
    cfg = resolve_config("debug", objective, {"max_seq_length": T, "temperature": temperature,
                                              "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0})
    model = PretrainingModel(cfg, SPECIAL).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids, mask = batch()
    rows = []
    for step in range(steps):
        out = model(ids, mask, model.draw_noise(ids, torch.Generator().manual_seed(100 + step)))
        out["loss"].backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        rows.append({k: float(v.detach()) for k, v in sorted(out.items())})
    return rows


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_fixed_seed_gives_the_recorded_losses(case):
    expected = json.loads(GOLDEN.read_text())["cases"][case]
    got = seeded_losses(*CASES[case])
    for step, (want, have) in enumerate(zip(expected, got, strict=True)):
        assert sorted(have) == sorted(want), f"step {step}: metrics {sorted(have)} != recorded {sorted(want)}"
        for name, value in want.items():
            # the first step is the objective itself; later ones also carry the optimizer's arithmetic
            assert have[name] == pytest.approx(value, rel=1e-4 if step == 0 else 1e-3, abs=1e-5), (case, step, name)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    torch.set_num_threads(1)
    GOLDEN.write_text(json.dumps({"note": "python tests/test_seeded_losses.py --write; recorded at 5c26bbd",
                                  "cases": {c: seeded_losses(*CASES[c]) for c in sorted(CASES)}}, indent=1) + "\n")
    print(f"wrote {GOLDEN}")
