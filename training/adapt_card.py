"""`electric adapt`'s report in words: the summary it prints and the model card it writes (MODEL/README.md), both
read off the report (adapt.json) that training/adapt.py builds."""

from __future__ import annotations

import json
from pathlib import Path

from training.adapt_choice import step_sentence

NGRAM_FILE = "ngram.arpa"  # training.adapt writes the n-gram LM under this name

HEALTH_FIGURES = (("val_energy_auc", "energy AUC (replaced vs original tokens)", ".3f"),
                  ("val_unigram_noise_auc", "AUC against unigram noise", ".3f"),
                  ("val_gen_nll", "cloze NLL", ".2f"), ("val_unigram_nll", "unigram NLL", ".2f"))



APPLIED_AS = {"lm": "the LM applied", "no_lm": "no LM: the first pass with tuned bonuses",
              "first_pass": "the first pass alone"}


def guard_sentence(name: str, r: dict, metric: str) -> str:
    """The guard's decision on one LM, in words, with its dev gain and interval."""
    g = r["guard"]
    lo, hi = g["ci"]
    gain = f"dev gain over the no-LM combination {g['gain']:.2f} {metric.upper()} points, {g['confidence']:.0%} " \
           f"interval [{lo:.2f}, {hi:.2f}]"
    if g["significant"]:
        return f"{name}: applied ({gain}; LM weight {r['weights']['lm']:g})"
    if hi < 0:
        return f"{name}: not applied: significantly worse than no LM ({gain})"
    return f"{name}: not applied: the gain is not significant ({gain})"


def _interval(g: dict) -> str:
    lo, hi = g["ci"]
    return f"{g['gain']:+.2f} [{lo:+.2f}, {hi:+.2f}]" + (" significant" if g["significant"] else "")


def summary(report: dict, split: str = "test") -> list[str]:
    """The `split` ("test" or "dev") figures of every candidate, one line each with its gain over the n-gram's choice
    and its 95% interval, the served one marked; none without test lists."""
    from training.adapt_choice import CANDIDATES, LABELS  # noqa: PLC0415

    res, metric = report["results"], report["inputs"]["metric"].upper()
    choice, model = res["choice"], res["model"]
    if split == "test" and "test" not in choice:
        return []
    t = choice["test"] if split == "test" else model["dev"]
    w = choice["candidates"]["no_lm"]["weights"]
    piece = f", {w['piece']:g}/piece" if w.get("piece") else ""

    def row(label: str, value: float, note: str = "") -> str:
        return f"  {metric} {label + ':':<20} {value:6.2f}" + (f"   ({note})" if note else "")

    where = report["inputs"]["test"]["file"] if split == "test" else report["inputs"]["dev"]["file"]
    rows = [f"{split}, {t['num_utterances']} utterances ({where}); gain over the 3-gram with its 95% interval:",
            row("first hypothesis", t["first"])]
    for c in CANDIDATES:
        rec = choice["candidates"][c]
        note = (f"first pass + {w['length']:g}/word{piece}" if c == "no_lm" and (w["length"] or w.get("piece"))
                else "the first pass alone" if c == "no_lm" else "")
        if c != "ngram":
            note = ", ".join(x for x in (note, f"vs 3-gram {_interval(rec[split + '_vs_ngram'])}") if x)
        if c == choice["served"]:
            note = "; ".join(x for x in (note, "what the server applies") if x)
        rows.append(row(LABELS[c], rec[split], note))
    rows.append(row("oracle", t["oracle"]))
    if split == "test":
        rows.append(f"against the no-LM choice, the served combination changed {t['changed']} utterances: "
                    f"{t['better']} better, {t['worse']} worse, {t['same']} as good")
    return rows


def detector_line(d: dict) -> str:
    """The detector's training on the lists' real errors, in one line of the card."""
    test = (f"; on the test lists' hypotheses {d['test_auc_zero_shot']:.3f} zero-shot, {d['test_auc_trained']:.3f} "
            "trained" if d.get("test_auc_trained") is not None else "")
    return (f"- the detector (`detector/`, `/v1/detect`): the adapted energy model fine-tuned on the train lists' "
            f"real errors ({d['hypotheses']:,} hypotheses aligned with their references; {d['steps']} steps, "
            f"{d['seconds'] / 60:.1f} minutes); AUC of real errors on the held-back lists {d['held_back_auc_before']:.3f} "
            f"before, {d['held_back_auc_after']:.3f} after ({'kept' if d['kept'] else 'not kept: the zero-shot one is served'})"
            f"{test}")


def refused_int8(refused: dict) -> str:
    """What the card says of each graph served fp32 because its int8 graph failed the export's gate."""
    said = [f"the {'detector' if name == 'detector' else 'model'}'s int8 graph ranked the parity sentences at Spearman "
            + (f"{x:.4f}" if x is not None else "below 0.99") + " against fp32 (and missed 0.99 with its FFN outputs "
            "in fp32 too)" for name, x in refused.items()]
    return (f"; {'; '.join(said)}: served fp32, about 2-3.4x the CPU time of int8 a request on 2 cores "
            "(docs/export.md)") if said else ""


def model_card(report: dict) -> str:
    """MODEL/README.md: a metadata header, then what the model is, what it was made from and how, its health, the
    guard's decision and the test figures beside the n-gram LM's."""
    i, res, h = report["inputs"], report["results"], report["health"]
    metric = i["metric"].upper()
    model, ngram, both, choice = res["model"], res["ngram"], res["model_and_ngram"], res["choice"]
    name = Path(i["out"]).name
    recipe, ngram_name = report["recipe"], f"the {ngram['order']}-gram LM (baseline)"
    graphs = report.get("exported") or {"model": i["precision"]}
    exported = graphs["model"] + ("" if graphs.get("detector", graphs["model"]) == graphs["model"] else
                                  f" (the detector {graphs['detector']})") + refused_int8(graphs.get("int8_refused", {}))
    header = ["---", "library_name: electric", f"base_model: {Path(i['checkpoint']['path']).name}",
              "pipeline_tag: text-ranking", "tags: [electric, reranking, n-best, onnx, domain-adaptation]",
              f"metrics: [{i['metric']}]", "---", ""]
    scorer = ("the cloze model: log q(x_t | x without t) of every token, summed, in one pass" if i["scorer"] == "cloze"
              else "Electric's energy: -s_t of every token, summed, in one pass")
    disc, train = report.get("discriminative"), i.get("train")
    if disc:
        scorer += (f", then trained on {train['lists']:,} n-best lists with references to rank this recogniser's "
                   "hypotheses by their word errors (minimum word error)")
    lines = [f"# {name}", "",
             f"{Path(i['checkpoint']['path']).name}, continued as Electric on {i['text']['sentences']:,} sentences of "
             f"one domain for {h['minutes']:.1f} minutes, exported to ONNX {exported}, with reranking "
             f"weights tuned on {i['dev']['lists']} n-best lists. `electric serve --model {name}` answers",
             f"`/v1/score` ({scorer}), `/v1/rerank` (with the weights below unless a request gives its own) and "
             "`/v1/detect` (Electric's energy model, `detector/`); gRPC the same.", "",
             "## Made from", "",
             f"- base checkpoint: `{i['checkpoint']['path']}` (sha256 `{i['checkpoint']['sha256']}`)",
             *[f"- text: `{f}` (sha256 `{s}`)" for f, s in zip(i["text"]["files"], i["text"]["sha256"], strict=True)],
             f"  - {i['text']['sentences']:,} sentences, each its own example",
             f"- dev lists: `{i['dev']['file']}` ({i['dev']['lists']} lists, {metric} tuned on them)",
             *([f"- test lists: `{i['test']['file']}` ({i['test']['lists']} lists, never tuned on)"] if i["test"] else []),
             f"- recipe: {recipe['epochs']} epochs at lr {recipe['lr']:g}, {i['minutes']:g} minutes at most; "
             f"{h['steps']} steps, {h['tokens']:,} tokens in {h['minutes']:.1f} minutes",
             *([f"- train lists: {', '.join(f'`{f}`' for f in train['files'])} ({train['lists']:,} lists; "
                f"{disc['train_lists']:,} trained on (the others' hypotheses all have the same errors), "
                f"{disc['held_back_lists']} held back to choose the epoch); {disc['steps']} steps of "
                f"{disc['lists_per_step']} lists at lr {disc['lr']:g}, {disc['tokens']:,} tokens in "
                f"{disc['seconds'] / 60:.1f} minutes ({disc['tokens_per_s']:,} tokens/s); held-back {metric} "
                f"{disc['held_back_before']:.2f}% before, {disc['held_back_after']:.2f}% after (epoch "
                f"{disc['chosen_epoch']:g} kept; stopped: {disc['stopped']})"] if disc else []),
             *([detector_line(disc["detector"])] if disc and disc.get("detector") else []),
             "",
             "## Training health (held-out text)", "",
             "| figure | start | end |", "|---|---|---|"]
    for key, label, fmt in HEALTH_FIGURES:
        start, end = (h.get("start") or {}).get(key), (h.get("end") or {}).get(key)
        if end is not None:
            lines.append(f"| {label} | {'-' if start is None else format(start, fmt)} | {format(end, fmt)} |")
    lines += ["", "The start is the checkpoint under a fresh head (the energy head and the cloze model are new); a model "
              "below chance or worse at the end than at the start is never written.", "",
              "## Reranking weights: the guard's decision", "",
              "total(h) = first-pass score + lm * model(h) + ngram * ngram(h) + length * words(h) + piece * "
              f"pieces(h), tuned on the dev lists. `{NGRAM_FILE}` is the {ngram['order']}-gram LM (ARPA, trained on "
              "the same text). The guard walks four combinations, simplest first - no LM, the n-gram, the model, "
              "both - and takes the next only when its dev gain over the one it holds is significant (a seeded "
              "paired bootstrap):", "",
              *[f"- {step_sentence(st, i['metric'])}" for st in choice["steps"]],
              f"- served: {choice['parts']}; weights (`electric.json` `rerank_weights`): "
              f"`{json.dumps(choice['weights'])}`", "",
              "Each tuning on its own:", "",
              f"- {guard_sentence('the adapted model', model, i['metric'])}",
              f"- {guard_sentence(ngram_name, ngram, i['metric'])}",
              f"- {guard_sentence('the adapted model over the n-gram combination', both, i['metric'])}", ""]
    lines += ["## Dev figures (the lists the weights were tuned on)", "", "```", *summary(report, "dev"), "```", ""]
    rows = summary(report)
    if rows:
        lines += ["## Test figures", "", "```", *rows, "```", ""]
    lines += ["## Versions", "", *[f"- {k} {v}" for k, v in report["versions"].items()], "",
              "## Command", "", "```", report["command"], "```", ""]
    return "\n".join(header + lines)
