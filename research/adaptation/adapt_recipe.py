#!/usr/bin/env python
"""Domain adaptation recipe: adapt a pretrained model to in-domain text, then rerank real first-pass n-best
lists with the first-pass score + lambda * LM + gamma * words, tuned on utterances the model never saw.

Stages (each is a sub-command; `all` runs them in order and writes the results table to WORK/report.md):

  split      ATIS train -> adaptation part (its references become training text) and tuning part
             (lists used to tune the weights); writes split.json with the ids that went where.
  conll      CoNLL-2000 tokens -> WSJ-style text (lower case, no punctuation, numbers spelled out, ...).
  split-lists  a seeded dev/test split of an n-best file (WSJ eval), written as two files + split.json.
  evaluate   score dev + test lists with several models, tune the weights on dev, report on test, with
             the scoring wall time of the test lists per method.

Nothing here reads a test list while tuning or training: ATIS test and the WSJ test half are only reported.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"
ATIS_TRAIN = DATA / "nbest" / "atis_train.whisper5best.json"
ATIS_TEST = DATA / "nbest" / "atis_test.whisper5best.json"
WSJ_EVAL = DATA / "nbest" / "wsj_eval.whisper5best.json"
CONLL_TRAIN = DATA / "tagging" / "conll2000" / "train.txt"
ADAPT_LR = 1e-3  # peak lr of continued pretraining (pretrain's default for --init-from would be 2e-4 at tiny)
if str(ROOT) not in sys.path:  # run as `python research/adaptation/adapt_recipe.py` from anywhere
    sys.path.insert(0, str(ROOT))


# ---- splits ------------------------------------------------------------------------------------------------


def split_ids(ids: list[str], fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """(first part, second part): a seeded random `fraction` of the ids and the rest, each in input order.
    Disjoint, covering, and identical for the same (ids, fraction, seed)."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    if len(set(ids)) != len(ids):
        raise ValueError("utterance ids are not unique")
    order = list(range(len(ids)))
    random.Random(seed).shuffle(order)
    n = round(fraction * len(ids))
    if n == 0 or n == len(ids):
        raise ValueError(f"fraction {fraction} of {len(ids)} utterances leaves an empty part")
    first = set(order[:n])
    return [ids[i] for i in range(len(ids)) if i in first], [ids[i] for i in range(len(ids)) if i not in first]


def _read(path):
    from electric.evaluation.nbest import read_nbest

    lists, fmt = read_nbest(path)
    return lists, fmt


def drop_overlap(lists, exclude_paths) -> tuple[list, list[str]]:
    """`lists` without the utterances whose id or reference text also occurs in the n-best files
    `exclude_paths` (ATIS train and ATIS test share 39 utterances: same id, same reference)."""
    ids, refs = set(), set()
    for path in exclude_paths:
        other, _ = _read(path)
        ids |= {nb.utt_id for nb in other}
        refs |= {nb.ref for nb in other if nb.ref}
    kept, dropped = [], []
    for nb in lists:
        (dropped if nb.utt_id in ids or (nb.ref and nb.ref in refs) else kept).append(nb)
    return kept, [nb.utt_id for nb in dropped]


def cmd_split(args) -> int:
    """ATIS train -> adapt.txt (references of the adaptation part), tune.json (lists of the tuning part)."""
    from electric.evaluation.nbest import write_nbest

    lists, fmt = _read(args.nbest)
    lists, excluded = drop_overlap(lists, args.exclude or [])
    ids = [nb.utt_id for nb in lists]
    adapt, tune = split_ids(ids, args.adapt_fraction, args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    adapt_set = set(adapt)
    with open(out / "adapt.txt", "w", encoding="utf-8") as f:  # one document per reference (blank line between)
        f.write("".join(f"{nb.ref}\n\n" for nb in lists if nb.utt_id in adapt_set))
    write_nbest([nb for nb in lists if nb.utt_id not in adapt_set], out / "tune.json", fmt)
    split = {"source": str(args.nbest), "seed": args.seed, "adapt_fraction": args.adapt_fraction,
             "num_utterances": len(ids), "excluded_files": [str(x) for x in args.exclude or []],
             "excluded": excluded, "adapt": adapt, "tune": tune,
             "files": {"adapt_text": str(out / "adapt.txt"), "tune_nbest": str(out / "tune.json")}}
    (out / "split.json").write_text(json.dumps(split, indent=1) + "\n")
    if excluded:
        print(f"left out {len(excluded)} utterances whose id or reference is also in {', '.join(args.exclude)}")
    print(f"{len(adapt)} utterances for adaptation ({out / 'adapt.txt'}), {len(tune)} for tuning "
          f"({out / 'tune.json'}); ids in {out / 'split.json'}")
    return 0


def cmd_split_lists(args) -> int:
    """An n-best file -> dev.json + test.json (seeded) and split.json."""
    from electric.evaluation.nbest import write_nbest

    lists, fmt = _read(args.nbest)
    for i, nb in enumerate(lists):  # lists without ids (WSJ) get "itemN" (N = 0-based position in the source),
        if "id" not in nb.extra:  # written into both files so that dev and test ids stay distinct
            nb.utt_id = f"item{i}"
            nb.extra = {"id": nb.utt_id, **nb.extra}
    ids = [nb.utt_id for nb in lists]
    dev, test = split_ids(ids, args.dev_fraction, args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev_set = set(dev)
    write_nbest([nb for nb in lists if nb.utt_id in dev_set], out / "dev.json", fmt)
    write_nbest([nb for nb in lists if nb.utt_id not in dev_set], out / "test.json", fmt)
    split = {"source": str(args.nbest), "seed": args.seed, "dev_fraction": args.dev_fraction,
             "num_utterances": len(ids), "dev": dev, "test": test}
    (out / "split.json").write_text(json.dumps(split, indent=1) + "\n")
    print(f"{len(dev)} dev and {len(test)} test utterances -> {out}/dev.json, test.json, split.json")
    return 0


# ---- CoNLL-2000 -> WSJ n-best style text --------------------------------------------------------------------

_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_SCALES = [(10 ** 12, "trillion"), (10 ** 9, "billion"), (10 ** 6, "million"), (1000, "thousand")]
_FRACTIONS = {(1, 2): "one half", (1, 4): "one quarter", (3, 4): "three quarters"}
_ORD_DENOM = {3: "third", 4: "quarter", 8: "eighth", 16: "sixteenth", 32: "thirty second", 64: "sixty fourth"}


def _below_1000(n: int) -> list[str]:
    out = []
    if n >= 100:
        out += [_ONES[n // 100], "hundred"]
        n %= 100
        if n:
            out.append("and")  # the WSJ lists say "one hundred and seventy five"
    if n >= 20:
        out.append(_TENS[n // 10])
        if n % 10:
            out.append(_ONES[n % 10])
    elif n or not out:
        out.append(_ONES[n])
    return out


def number_words(n: int) -> list[str]:
    """Cardinal words of a non-negative integer: 175000 -> one hundred and seventy five thousand."""
    if n < 1000:
        return _below_1000(n)
    out = []
    for value, name in _SCALES:
        if n >= value:
            out += number_words(n // value) + [name]
            n %= value
    if n:
        out += _below_1000(n)
    return out


def year_words(n: int) -> list[str]:
    """1987 -> nineteen eighty seven; 1900 -> nineteen hundred; 2005 -> two thousand five."""
    hi, lo = divmod(n, 100)
    if hi == 20 and lo < 10:
        return ["two", "thousand"] + ([_ONES[lo]] if lo else [])
    tail = ["hundred"] if lo == 0 else (["oh", _ONES[lo]] if lo < 10 else _below_1000(lo))
    return _below_1000(hi) + tail


def numeral_words(tok: str) -> list[str] | None:
    """Words of a numeric token (1,200 / 3.5 / 1987 / 5\\/8 / 2\\/3), or None when it is not one."""
    t = tok.replace("\\/", "/")
    m = re.fullmatch(r"(\d+)/(\d+)", t)
    if m:
        a, b = int(m.group(1)), int(m.group(2))
        if (a, b) in _FRACTIONS:
            return _FRACTIONS[(a, b)].split()
        den = _ORD_DENOM.get(b)
        if den is None:
            return number_words(a) + ["over"] + number_words(b)
        return number_words(a) + (den + ("s" if a != 1 else "")).split()
    if re.fullmatch(r"\d{4}", t) and 1100 <= int(t) <= 2099:
        return year_words(int(t))
    m = re.fullmatch(r"(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?", t)
    if m:
        words = number_words(int(m.group(1).replace(",", "")))
        if m.group(2) is not None:
            words += ["point"] + [_ONES[int(c)] for c in m.group(2)]
        return words
    m = re.fullmatch(r"\.(\d+)", t)
    if m:
        return ["point"] + [_ONES[int(c)] for c in m.group(1)]
    return None


_WORD_MAP = {
    "mr.": "mister", "mrs.": "missus", "ms.": "ms", "dr.": "doctor", "st.": "saint",
    "corp.": "corporation", "inc.": "incorporated", "co.": "company", "cos.": "companies", "ltd.": "limited",
    "bros.": "brothers", "jr.": "junior", "vs.": "versus", "no.": "number",
    "jan.": "january", "feb.": "february", "aug.": "august", "sept.": "september", "oct.": "october",
    "nov.": "november", "dec.": "december", "calif.": "california", "mass.": "massachusetts",
    "%": "percent", "&": "and", "``": "quote", "''": "unquote",
    "'s": "is",  # the WSJ lists write every 's as "is" ("the company is advisers")
    "n't": "not", "'re": "are", "'ve": "have", "'ll": "will", "'m": "am", "'d": "would",
    "ca": "can", "wo": "will",  # ca n't / wo n't
}
_DROP = {",", ".", ":", ";", "--", "-", "...", "?", "!", "'", "`", "-lrb-", "-rrb-", "-lcb-", "-rcb-",
         "-lsb-", "-rsb-"}


def conll_sentence_to_text(tokens: list[str]) -> str:
    """One CoNLL-2000 sentence (its first-column tokens) written the way the WSJ n-best lists write text:
    lower case, no punctuation, spelled-out numbers ("$ 5 million" -> "five million dollars", "%" ->
    "percent", years "nineteen eighty seven"), abbreviations expanded (Mr. -> mister, Corp. -> corporation),
    dotted and short upper-case acronyms spelled letter by letter (U.S. -> u s, IBM -> i b m), "'s" -> is,
    "n't" -> not, `` '' -> quote / unquote, hyphens -> spaces."""
    out: list[str] = []
    pending_dollar: str | None = None  # "$" waits for its amount: "$ 5 million" -> five million dollars
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        low = tok.lower()
        i += 1
        if tok in ("$", "US$", "C$", "A$", "#"):
            pending_dollar = "pounds" if tok == "#" else "dollars"
            continue
        if low in _DROP:
            continue
        if low in _WORD_MAP:
            words = _WORD_MAP[low].split()
        elif (w := numeral_words(tok)) is not None:
            words = w
            if pending_dollar:
                if i < len(tokens) and tokens[i].lower() in ("million", "billion", "trillion"):
                    words.append(tokens[i].lower())
                    i += 1
                words.append(pending_dollar[:-1] if w == ["one"] else pending_dollar)
                pending_dollar = None
        elif re.fullmatch(r"(?:[A-Za-z]\.){2,}[A-Za-z]?\.?", tok) or re.fullmatch(r"[A-Z]{2,3}", tok):
            words = [c for c in low if c.isalpha()]
        else:
            words = [p for p in re.split(r"[^a-z0-9']+", low) if p]
            expanded = []
            for p in words:
                n = numeral_words(p)
                expanded += n if n is not None else [p.replace("'", "")]
            words = [w for w in expanded if w]
        if pending_dollar:  # "$" not followed by a number
            out.append(pending_dollar)
            pending_dollar = None
        out += words
    if pending_dollar:
        out.append(pending_dollar)
    return " ".join(out)


def read_conll_sentences(path: str | Path) -> list[list[str]]:
    """First-column tokens of a CoNLL file, one list per sentence (blank lines separate sentences)."""
    sents, cur = [], []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            if cur:
                sents.append(cur)
            cur = []
        else:
            cur.append(line.split()[0])
    if cur:
        sents.append(cur)
    return sents


def cmd_conll(args) -> int:
    sents = [conll_sentence_to_text(s) for s in read_conll_sentences(args.conll)]
    sents = [s for s in sents if s]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(f"{s}\n\n" for s in sents), encoding="utf-8")
    print(f"{len(sents)} sentences, {sum(len(s.split()) for s in sents)} words -> {out}")
    return 0


# ---- evaluation -------------------------------------------------------------------------------------------


def score_lists(model: str, method: str, lists, threads: int | None = None):
    """(ScoredLists without piece counts, seconds, distinct texts) of every hypothesis of `lists` (each text once)."""
    import torch

    from electric.evaluation.nbest import ScoredLists
    from electric.inference.scoring import load_scorer

    if threads:
        torch.set_num_threads(threads)
    scorer = load_scorer(model, method, backend="torch")
    t0 = time.perf_counter()
    scores, _ = ScoredLists.score(lists, lambda texts: scorer.score(texts, method=method), chunk_size=1024)
    secs = time.perf_counter() - t0
    return scores.without_pieces(), secs, len({h for nb in lists for h in nb.hyps})


def first_pass_only(dev, test) -> dict:
    """WER of the best first-pass score (LM weight 0) on test, plus first and oracle."""
    import numpy as np

    from electric.evaluation.nbest import RerankOptions, Weights, rerank_report

    zeros = [np.zeros(len(nb.hyps)) for nb in test]
    _, rep = rerank_report(test, zeros, RerankOptions(weights=Weights(lm=0.0, length=0.0)))
    out = rep["test"]
    # no LM, only a word bonus tuned on dev: every report's no_lm row
    _, rep = rerank_report(test, zeros, dev=(dev, [np.zeros(len(nb.hyps)) for nb in dev]))
    out["words_only"] = rep["test"]["no_lm"]
    out["words_only_weight"] = rep["weights_no_lm"]["length"]
    return out


def cmd_evaluate(args) -> int:
    from electric.evaluation.nbest import rerank_scored

    dev, _ = _read(args.dev)
    test, _ = _read(args.test)
    overlap = {nb.utt_id for nb in dev} & {nb.utt_id for nb in test}
    if overlap and not args.allow_overlap:
        print(f"error: {len(overlap)} utterance ids are both in dev and test", file=sys.stderr)
        return 2
    base = first_pass_only(dev, test)
    result = {"dev": str(args.dev), "test": str(args.test), "num_dev": len(dev), "num_test": len(test),
              "first": base["first"], "first_pass": base["reranked"], "oracle": base["oracle"],
              "first_pass_plus_words": base["words_only"], "word_bonus": base["words_only_weight"], "rows": []}
    print(f"test: first hypothesis {base['first']:.2f}%, best first-pass score {base['reranked']:.2f}%, "
          f"oracle {base['oracle']:.2f}%; first-pass + tuned word bonus (no LM) {base['words_only']:.2f}% "
          f"(bonus {base['words_only_weight']:g})", flush=True)
    for spec in args.model:
        label, rest = spec.split("=", 1)
        model, method = rest.rsplit(":", 1)
        dev_scores, _, _ = score_lists(model, method, dev, args.threads)
        test_scores, secs, n_texts = score_lists(model, method, test, args.threads)
        row = {"label": label, "model": model, "method": method, "test_seconds": secs, "test_texts": n_texts}
        # both LM scores (sum, length-normalised mean) tuned; the one kept is chosen on dev, never on test
        tuned = rerank_scored(test_scores, dev=dev_scores, dev_path=args.dev, path=args.test).report.to_dict()
        row.update(tuned["by_lm_score"], chosen=tuned["lm_score"])
        result["rows"].append(row)
        print(f"{label} ({method}): test {row[row['chosen']]['test']:.2f}% with the {row['chosen']} LM score "
              f"(sum {row['sum']['test']:.2f}%, mean {row['mean']['test']:.2f}%; dev {row['sum']['dev']:.2f}% / "
              f"{row['mean']['dev']:.2f}%), scoring {n_texts} test texts in {secs:.1f}s", flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


def cmd_speed(args) -> int:
    """Scoring wall time of the same texts (the first --limit distinct hypotheses of --nbest) with each
    MODEL:METHOD, interleaved for --rounds rounds so that the shared machine's load hits every method alike."""
    import torch

    from electric.inference.scoring import load_scorer

    torch.set_num_threads(args.threads)
    lists, _ = _read(args.nbest)
    texts = list(dict.fromkeys(h for nb in lists for h in nb.hyps))[: args.limit]
    scorers = []
    for spec in args.model:
        model, method = spec.rsplit(":", 1)
        scorers.append((spec, method, load_scorer(model, method, backend="torch")))
        scorers[-1][2].score(texts[:8], method=method)  # warm-up
    times = {spec: [] for spec, _, _ in scorers}
    for _ in range(args.rounds):
        for spec, method, sc in scorers:
            t0 = time.perf_counter()
            sc.score(texts, method=method)
            times[spec].append(time.perf_counter() - t0)
    out = {"nbest": str(args.nbest), "texts": len(texts), "threads": args.threads, "rounds": args.rounds,
           "seconds": times, "best_seconds": {k: min(v) for k, v in times.items()}}
    first = min(times[args.model[0]])
    for spec in args.model:
        print(f"{spec}: {len(texts)} texts in {min(times[spec]):.2f}s (best of {args.rounds}; "
              f"{min(times[spec]) / first:.1f}x the first)")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


def cmd_report(args) -> int:
    """Merge `evaluate` results (DOMAIN=FILE ...) into the markdown table of research/adaptation/results/adaptation.md."""
    lines = ["| domain (test) | model | LM score | first hyp | best first-pass | first-pass + word bonus, no LM | "
             "reranked, no adaptation | reranked, adapted | oracle | test scoring time (s), base / adapted | "
             "weights (adapted: lm, length) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for spec in args.results:
        domain, files = spec.split("=", 1)
        rows, head = {}, None
        for f in files.split(","):
            if not Path(f).is_file():
                continue
            r = json.loads(Path(f).read_text())
            head = head or r
            for row in r["rows"]:
                rows[row["label"]] = row
        if head is None:
            continue
        for obj, name in (("electric", "electric (1 pass)"), ("mlm", "mlm-pll (n passes)")):
            b, a = rows.get(f"{obj} base"), rows.get(f"{obj} adapted")
            if not b and not a:
                continue

            def cell(row, key="test"):
                return f"{row[row['chosen']][key]:.2f}" if row else "–"

            def secs(row):
                return f"{row['test_seconds']:.1f}" if row else "–"

            w = a[a["chosen"]]["weights"] if a else None
            wtxt = f"{w['lm']:g}, {w['length']:g}" if w else "–"
            chosen = "/".join(sorted({r["chosen"] for r in (b, a) if r}))
            lines.append(f"| {domain} ({head['num_test']} utt.) | {name} | {chosen} | {head['first']:.2f} | "
                         f"{head['first_pass']:.2f} | {head.get('first_pass_plus_words', float('nan')):.2f} | {cell(b)} | "
                         f"{cell(a)} | {head['oracle']:.2f} | "
                         f"{secs(b)} / {secs(a)} | {wtxt} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


# ---- the whole recipe -------------------------------------------------------------------------------------


def run(cmd: list[str]) -> float:
    print("+ " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT)
    return time.perf_counter() - t0


def pretrain_cmd(init: str, objective: str, data: str, out: str, epochs: float, seed: int, lr: float | None,
                 num_proc: int) -> list[str]:
    # --epochs also fits the lr schedule (warmup 10% of the run, linear decay to 0 at the last epoch); the
    # warmup floor that protects fresh discriminators is off: these runs are short by design, from trained weights
    cmd = [sys.executable, "-m", "training.pretrain", "--init-from", init, "--objective", objective,
           "--data", data, "--epochs", f"{epochs:g}", "--out", out, "--seed", str(seed),
           "--num-proc", str(num_proc), "--min-warmup-steps", "0", "--overwrite"]
    if lr is not None:
        cmd += ["--lr", f"{lr:g}"]
    return cmd


def cmd_all(args) -> int:
    py = sys.executable
    me = str(Path(__file__).resolve())
    work = Path(args.work)
    times = {}
    for domain in args.domains:
        d = work / domain
        if domain == "atis":
            run([py, me, "split", "--nbest", str(ATIS_TRAIN), "--adapt-fraction", "0.6667", "--seed", str(args.seed),
                 "--exclude", str(ATIS_TEST), "--out", str(d)])
            text, dev, test = d / "adapt.txt", d / "tune.json", str(ATIS_TEST)
        else:
            run([py, me, "conll", "--conll", str(CONLL_TRAIN), "--out", str(d / "adapt.txt")])
            run([py, me, "split-lists", "--nbest", str(WSJ_EVAL), "--dev-fraction", "0.5", "--seed", str(args.seed),
                 "--out", str(d)])
            text, dev, test = d / "adapt.txt", d / "dev.json", str(d / "test.json")
        specs = []
        for obj, base, method in (("electric", args.electric, "electric"), ("mlm", args.mlm, "mlm-pll")):
            if obj not in args.objectives:
                continue
            out = str(Path(args.models) / f"adapt-{domain}-{obj}")
            if not args.skip_training:
                epochs = args.epochs if domain == "atis" else args.wsj_epochs
                times[f"{domain}/{obj}"] = run(pretrain_cmd(base, obj, str(text), out, epochs, args.seed,
                                                            args.lr, args.num_proc))
            specs += [f"{obj} base={base}:{method}", f"{obj} adapted={out}:{method}"]
        cmd = [py, me, "evaluate", "--dev", str(dev), "--test", test, "--out", str(d / "results.json")]
        for s in specs:
            cmd += ["--model", s]
        run(cmd)
    (work / "train_times.json").write_text(json.dumps(times, indent=1) + "\n")
    results = [f"{d}={work / d / 'results.json'}" for d in args.domains]
    return cmd_report(argparse.Namespace(results=results, out=str(work / "report.md")))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("split", help="ATIS train -> adaptation text + tuning lists + split.json")
    p.add_argument("--nbest", default=str(ATIS_TRAIN))
    p.add_argument("--adapt-fraction", type=float, default=0.6667)
    p.add_argument("--exclude", nargs="*", default=[str(ATIS_TEST)], metavar="NBEST",
                   help="leave out utterances whose id or reference is in these files (default: ATIS test)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_split)
    p = sub.add_parser("split-lists", help="seeded dev/test split of an n-best file")
    p.add_argument("--nbest", default=str(WSJ_EVAL))
    p.add_argument("--dev-fraction", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_split_lists)
    p = sub.add_parser("conll", help="CoNLL-2000 -> WSJ-style text")
    p.add_argument("--conll", default=str(CONLL_TRAIN))
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_conll)
    p = sub.add_parser("evaluate", help="tune on --dev, report on --test, per model")
    p.add_argument("--dev", required=True, help="n-best file the weights are tuned on")
    p.add_argument("--test", required=True, help="n-best file reported on (never used for tuning)")
    p.add_argument("--model", action="append", required=True, metavar="LABEL=DIR:METHOD",
                   help="a model to evaluate, e.g. 'electric adapted=runs/adapt-atis-electric:electric' or "
                        "'mlm=runs/mlm-tiny:mlm-pll' (repeat for several)")
    p.add_argument("--out", required=True, help="results JSON")
    p.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    p.add_argument("--allow-overlap", action="store_true", help="allow utterance ids in both --dev and --test")
    p.set_defaults(fn=cmd_evaluate)
    p = sub.add_parser("speed", help="interleaved scoring time of the same texts per MODEL:METHOD")
    p.add_argument("--nbest", default=str(ATIS_TEST), help="lists whose hypotheses are timed (default ATIS test)")
    p.add_argument("--model", action="append", required=True, metavar="DIR:METHOD",
                   help="a model and scoring method, e.g. runs/adapt-atis-mlm:mlm-pll (give two or more)")
    p.add_argument("--limit", type=int, default=400, help="distinct hypotheses timed (default 400)")
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds; the best is kept (default 2)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--out", help="write the timings as JSON here")
    p.set_defaults(fn=cmd_speed)
    p = sub.add_parser("report", help="markdown table of evaluate results")
    p.add_argument("results", nargs="+", metavar="DOMAIN=RESULTS.json[,MORE.json]",
                   help="evaluate results per domain, e.g. atis=runs/adapt-data/atis/results.json")
    p.add_argument("--out", help="write the markdown here (default: print it)")
    p.set_defaults(fn=cmd_report)
    p = sub.add_parser("all", help="the whole recipe")
    p.add_argument("--work", default="runs/adapt-data", help="splits, text and results go here")
    p.add_argument("--domains", nargs="+", default=["atis", "wsj"], choices=["atis", "wsj"])
    p.add_argument("--objectives", nargs="+", default=["electric", "mlm"], choices=["electric", "mlm"])
    p.add_argument("--electric", default="runs/electric-tiny", help="pretrained Electric run to adapt")
    p.add_argument("--mlm", default="runs/mlm-tiny", help="pretrained MLM run to adapt")
    p.add_argument("--epochs", type=float, default=64, help="ATIS adaptation epochs (64: the text is only "
                   "2,617 short sentences; research/adaptation/results/adaptation.md compares 4 to 64)")
    p.add_argument("--wsj-epochs", type=float, default=4, help="CoNLL-2000 epochs (4)")
    p.add_argument("--lr", type=float, default=ADAPT_LR, help="peak lr of continued pretraining (1e-3; the "
                   "pretrain default for --init-from would be 1/5 of the preset's, 2e-4 for tiny)")
    p.add_argument("--seed", type=int, default=0, help="seed of the splits and of training")
    p.add_argument("--num-proc", type=int, default=1, help="data preprocessing processes")
    p.add_argument("--models", default="runs", help="adapted models go to MODELS/adapt-DOMAIN-OBJECTIVE (runs)")
    p.add_argument("--skip-training", action="store_true",
                   help="reuse the adapted models already in MODELS/adapt-DOMAIN-OBJECTIVE")
    p.set_defaults(fn=cmd_all)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
