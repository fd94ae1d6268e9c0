"""`electric adapt`'s report in words: the summary it prints and the model card it writes (MODEL/README.md), both
read off the report (adapt.json) that training/adapt.py builds."""

from __future__ import annotations

import json
from pathlib import Path

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


BOTH_APPLIED_AS = {"lm": "the adapted model added", "no_lm": "the n-gram's combination with tuned bonuses",
                   "first_pass": "the n-gram's combination alone"}


def summary(report: dict) -> list[str]:
    """The test figures of every system, one line each (none without test lists)."""
    res, metric = report["results"], report["inputs"]["metric"].upper()
    model, ngram, both = res["model"], res["ngram"], res["model_and_ngram"]
    if "test" not in model:
        return []
    t = model["test"]
    w = model["weights_no_lm"]
    piece = f", {w['piece']:g}/piece" if w.get("piece") else ""

    def row(label: str, value: float, note: str = "") -> str:
        return f"  {metric} {label + ':':<20} {value:6.2f}" + (f"   ({note})" if note else "")

    rows = [f"test, {t['num_utterances']} utterances ({report['inputs']['test']['file']}):",
            row("first hypothesis", t["first"]),
            row("without an LM", t["no_lm"], f"first pass + {w['length']:g}/word{piece}, tuned on dev"),
            row(f"{ngram['order']}-gram LM", ngram["test"]["after"], APPLIED_AS[ngram["applied"]]),
            row("adapted model", t["after"], f"{APPLIED_AS[model['applied']]}: what the server applies")]
    if both is not None:
        rows.append(row("both LMs", both["test"]["after"], BOTH_APPLIED_AS[both["applied"]]))
    rows += [row("oracle", t["oracle"]),
             f"against the no-LM choice, the adapted model changed {t['changed']} utterances: {t['better']} better, "
             f"{t['worse']} worse, {t['same']} as good"]
    return rows


def model_card(report: dict) -> str:
    """MODEL/README.md: a metadata header, then what the model is, what it was made from and how, its health, the
    guard's decision and the test figures beside the n-gram LM's."""
    i, res, h = report["inputs"], report["results"], report["health"]
    metric = i["metric"].upper()
    model, ngram, both = res["model"], res["ngram"], res["model_and_ngram"]
    name = Path(i["out"]).name
    recipe, ngram_name = report["recipe"], f"the {ngram['order']}-gram LM (baseline)"
    graphs = report.get("exported") or {"model": i["precision"]}
    exported = graphs["model"] + ("" if graphs.get("detector", graphs["model"]) == graphs["model"] else
                                  f" (the detector {graphs['detector']}: its int8 graph failed its gate)")
    header = ["---", "library_name: electric", f"base_model: {Path(i['checkpoint']['path']).name}",
              "pipeline_tag: text-ranking", "tags: [electric, reranking, n-best, onnx, domain-adaptation]",
              f"metrics: [{i['metric']}]", "---", ""]
    scorer = ("the cloze model: log q(x_t | x without t) of every token, summed, in one pass" if i["scorer"] == "cloze"
              else "Electric's energy: -s_t of every token, summed, in one pass")
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
             f"{h['steps']} steps, {h['tokens']:,} tokens in {h['minutes']:.1f} minutes", "",
             "## Training health (held-out text)", "",
             "| figure | start | end |", "|---|---|---|"]
    for key, label, fmt in HEALTH_FIGURES:
        start, end = (h.get("start") or {}).get(key), (h.get("end") or {}).get(key)
        if end is not None:
            lines.append(f"| {label} | {'-' if start is None else format(start, fmt)} | {format(end, fmt)} |")
    lines += ["", "The start is the checkpoint under a fresh head (the energy head and the cloze model are new); a model "
              "below chance or worse at the end than at the start is never written.", "",
              "## Reranking weights: the guard's decision", "",
              "total(h) = first-pass score + lm * LM(h) + length * words(h) + piece * pieces(h), tuned on the dev "
              "lists; an LM is applied only when its dev gain over the first pass with tuned bonuses is significant "
              "(a seeded paired bootstrap).", "",
              f"- {guard_sentence('the adapted model', model, i['metric'])}",
              f"- {guard_sentence(ngram_name, ngram, i['metric'])}",
              *([f"- {guard_sentence('the adapted model over the n-gram combination', both, i['metric'])}"]
                if both else []),
              f"- served weights (`electric.json` `rerank_weights`): `{json.dumps(model['weights'])}`", ""]
    rows = summary(report)
    if rows:
        lines += ["## Test figures", "", "```", *rows, "```", ""]
    lines += ["## Versions", "", *[f"- {k} {v}" for k, v in report["versions"].items()], "",
              "## Command", "", "```", report["command"], "```", ""]
    return "\n".join(header + lines)
