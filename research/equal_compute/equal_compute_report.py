"""The equal-compute study's report (research/equal_compute/equal_compute.py `report`): Markdown and JSON from WORK, the
health curves beside them, and issue 22's targets stated as met or missed with their figures.

JSON: {"runs": {NAME: {"objective", "recipe", "tokens", "unigram_noise_auc", "own_generator_auc", "token_cosine",
"blimp12": {METHOD: {"accuracy" (percent), "seconds"}}, "atis_wer": {METHOD: percent}, "glue_average" (x100)}},
"machine": {...}, "bootstrap": {...}}.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
from pathlib import Path

from electric.evaluation.blimp import paired_bootstrap_mean_diff
from electric.hardware import cpu_description
from electric.pretraining.health import collapse_reasons_in
from research.first_tiny_runs.glue_compare import AVERAGE

REPO = Path(__file__).resolve().parents[2]
RANDOM = "random-init"
PREVIOUS = REPO / "research" / "equal_compute" / "results" / "equal_compute_defaults.json"  # v3 reuses its random-init GLUE row
HEALTH_KEYS = ("val_disc_auc", "val_energy_auc", "val_unigram_noise_auc", "val_disc_acc_gain", "val_logit_spread",
               "val_token_cosine", "val_gen_nll", "val_unigram_nll")
REFERENCE = "mlm-pll"  # the n-pass method every one-pass method is compared with
BOOTSTRAP = {"resamples": 10_000, "seed": 0, "confidence": 0.95}


def read_metrics(run_dir: Path) -> tuple[dict, list[dict], list[dict]]:
    """(config, training rows, validation rows) of a pretraining run."""
    cfg = json.loads((run_dir / "config.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return cfg, [r for r in rows if "loss" in r], [r for r in rows if "val_loss" in r and "tokens" in r]


def read_json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def fmt(v, scale: float = 1.0, digits: int = 1) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v * scale:.{digits}f}"


def display(path: str | Path) -> str:
    p = Path(path)
    return str(p.relative_to(REPO)) if p.is_absolute() and p.is_relative_to(REPO) else str(p)


def lscpu() -> dict:
    """The CPU's model name and flags as lscpu prints them ({} where lscpu is missing)."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {k: fields[name].strip() for k, name in (("model", "Model name"), ("cpus", "CPU(s)"), ("flags", "Flags"))
            if name in fields}


# ---- results per stage -------------------------------------------------------------------------------------

def glue_results(work: Path, names: list[str], tasks: list[str], seeds: list[int]) -> dict:
    """{model: {task: {seed: dev metrics}}} from the fine-tuning runs that finished."""
    res: dict = {}
    for name in names:
        for task in tasks:
            for seed in seeds:
                f = work / "glue" / name / task / f"seed{seed}" / "eval.json"
                if f.is_file():
                    res.setdefault(name, {}).setdefault(task, {})[seed] = json.loads(f.read_text())["dev"]
    return res


def glue_average(by_task: dict, tasks: list[str], seeds: list[int]) -> float | None:
    """x100: mean over tasks of the mean over `seeds` (None unless every task has every one of them)."""
    if not seeds or any(sd not in by_task.get(t, {}) for t in tasks for sd in seeds):
        return None
    return 100 * statistics.mean(statistics.mean(by_task[t][sd][AVERAGE[t]] for sd in seeds) for t in tasks)


def blimp_results(work: Path, names: list[str]) -> dict:
    """{run: {method: the blimp stage's report}}."""
    out: dict = {}
    for name in names:
        for f in sorted((work / "blimp").glob(f"{name}.*.json")):
            rep = json.loads(f.read_text())
            if rep.get("run") == name:
                out.setdefault(name, {})[rep["method"]] = rep
    return out


def flat(correct: dict, order: list[str]) -> list[bool]:
    return [c for k in order for c in correct[k]]


def bootstrap(blimp: dict) -> dict | None:
    """Paired bootstrap of each one-pass (run, method)'s BLiMP accuracy minus MLM PLL's, in points."""
    ref = next(((n, m) for n, ms in blimp.items() for m in ms if m == REFERENCE), None)
    if ref is None:
        return None
    ref_rep = blimp[ref[0]][ref[1]]
    order = list(ref_rep["correct"])
    base = flat(ref_rep["correct"], order)
    comparisons = {}
    for name, methods in blimp.items():
        for method, rep in methods.items():
            if method == REFERENCE or set(rep.get("correct", {})) != set(order):
                continue
            r = paired_bootstrap_mean_diff(flat(rep["correct"], order), base, **BOOTSTRAP)
            comparisons[f"{name}/{method}"] = {"diff_points": 100 * r["diff"], "ci_points": [100 * x for x in r["ci"]],
                                               "significant": r["significant"], "pairs": r["items"]}
    if not comparisons:
        return None
    best = max(comparisons, key=lambda k: blimp[k.split("/")[0]][k.split("/")[1]]["overall"]["accuracy"])
    return {"reference": f"{ref[0]}/{ref[1]}", **BOOTSTRAP, "best_one_pass": best, "comparisons": comparisons}


def atis_results(work: Path, names: list[str]) -> tuple[dict, dict | None]:
    """({run: {method: evaluate's row}}, the first results file's first-pass figures)."""
    rows: dict = {}
    head = None
    for name in names:
        r = read_json(work / "atis" / f"results.{name}.json")
        if r is None:
            continue
        head = head or r
        for row in r["rows"]:
            rows.setdefault(name, {})[row["method"]] = row
    return rows, head


# ---- the report --------------------------------------------------------------------------------------------

def plot_curves(vals: dict[str, list[dict]], switches: dict[str, int | None], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = (("val_unigram_noise_auc", "AUC against fixed unigram noise (context only)"),
            ("val_disc_auc", "AUC against its own generator (dashed: Electric's energy)"),
            ("val_token_cosine", "last-layer cross-sequence token cosine"),
            ("val_gen_nll", "generator / cloze / MLM NLL (dashed: unigram)"))
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.4))
    for i, (name, val) in enumerate(vals.items()):
        for ax, (key, title) in zip(axes, keys, strict=True):
            pts = [(r["tokens"], r[key]) for r in val if key in r]
            if pts:
                ax.plot(*zip(*pts, strict=True), ".-", ms=3, label=name, color=f"C{i}")
            extra = {"val_disc_auc": "val_energy_auc", "val_gen_nll": "val_unigram_nll"}.get(key)
            pts = [(r["tokens"], r[extra]) for r in val if extra in r]
            if pts:
                ax.plot(*zip(*pts, strict=True), ls="--", color=f"C{i}", alpha=0.5)
            if switches.get(name):
                ax.axvline(switches[name], color=f"C{i}", ls=":", alpha=0.6)
            ax.set_title(title, fontsize=10)
            ax.set_xlabel("tokens seen (dotted: end of the warm start)")
    axes[0].axhline(0.75, color="grey", ls="-.", lw=0.8)
    axes[2].axhline(0.9, color="grey", ls="-.", lw=0.8)
    for ax in axes:
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def verdict(ok: bool | None) -> str:
    return "**not measured**" if ok is None else "**met**" if ok else "**missed**"


def targets(runs: dict, boot: dict | None, blimp: dict) -> list[str]:
    """Issue 22's targets (a)-(d), each met or missed with its figures."""
    lines = ["## Targets (issue 22)", ""]
    discs = {n: r for n, r in runs.items() if r["objective"] != "mlm"}
    oks = [r["unigram_noise_auc"] is not None and r["unigram_noise_auc"] >= 0.75 and r["token_cosine"] is not None
           and r["token_cosine"] < 0.9 for r in discs.values()]
    figs = "; ".join(f"{n}: unigram-noise AUC {fmt(r['unigram_noise_auc'], 1, 3)}, token cosine "
                     f"{fmt(r['token_cosine'], 1, 3)}" for n, r in discs.items())
    lines.append(f"- **(a)** discriminators keep learning context (unigram-noise AUC ≥ 0.75 and token cosine < 0.9 at "
                 f"the end): {verdict(all(oks) if oks else None)} — met by {sum(oks)} of {len(oks)}. {figs}.")
    if boot:
        best = boot["best_one_pass"]
        c = boot["comparisons"][best]
        bn, bm = best.split("/")
        rn, rm = boot["reference"].split("/")
        secs, ref_secs = blimp[bn][bm]["seconds"], blimp[rn][rm]["seconds"]
        ratio = ref_secs / secs if secs > 0 else math.inf
        ok = c["diff_points"] >= 2 and c["ci_points"][0] > 0 and ratio >= 10
        lines.append(f"- **(b)** best one-pass method ≥ 2 points above MLM PLL on BLiMP-12, bootstrap interval above 0, "
                     f"≥ 10× less scoring time: {verdict(ok)} — {best} {blimp[bn][bm]['overall']['accuracy']:.2f}% vs "
                     f"{boot['reference']} {blimp[rn][rm]['overall']['accuracy']:.2f}%: {c['diff_points']:+.2f} points, "
                     f"95% interval [{c['ci_points'][0]:+.2f}, {c['ci_points'][1]:+.2f}], {secs:.1f} s vs "
                     f"{ref_secs:.1f} s ({ratio:.1f}× less). The best is chosen among {len(boot['comparisons'])} "
                     "one-pass methods on these same pairs, so its interval is a little optimistic.")
    else:
        lines.append(f"- **(b)** BLiMP-12: {verdict(None)}.")
    wers = {(n, m): w for n, r in runs.items() for m, w in r["atis_wer"].items()}
    ref = next((w for (n, m), w in wers.items() if m == REFERENCE), None)
    one = {k: w for k, w in wers.items() if k[1] != REFERENCE}
    if ref is not None and one:
        (bn, bm), bw = min(one.items(), key=lambda kv: kv[1])
        lines.append(f"- **(c)** ATIS adapted, a one-pass method at or below MLM PLL's test WER: {verdict(bw <= ref)} — "
                     f"best one-pass {bn}/{bm} {bw:.2f}% vs MLM PLL {ref:.2f}% (others: "
                     + ", ".join(f"{n}/{m} {w:.2f}%" for (n, m), w in one.items() if (n, m) != (bn, bm)) + ").")
    else:
        lines.append(f"- **(c)** ATIS: {verdict(None)}.")
    mlm = next((r["glue_average"] for r in runs.values() if r["objective"] == "mlm"), None)
    electra = {n: r["glue_average"] for n, r in runs.items() if r["objective"] == "electra"}
    if mlm is not None and electra and all(v is not None for v in electra.values()):
        above = [n for n, v in electra.items() if v > mlm]
        lines.append(f"- **(d)** ELECTRA's GLUE average above MLM's: {verdict(bool(above))} — MLM {mlm:.1f}, "
                     + ", ".join(f"{n} {v:.1f}" for n, v in electra.items())
                     + (f" ({', '.join(above)} above)" if above else "") + ".")
    else:
        lines.append(f"- **(d)** GLUE: {verdict(None)}.")
    return lines


def write_report(args, commands: list[str]) -> None:
    """WORK -> args.out (.md), its .json twin and the curves PNG; `commands`: the pretraining commands."""
    work, out = Path(args.work), Path(args.out)
    names = [n for n in args.recipes if (work / n / "metrics.jsonl").is_file()]
    blimp = blimp_results(work, names)
    boot = bootstrap(blimp)
    atis, atis_head = atis_results(work, names)
    glue_names = [n for n in args.glue_models if n in names or n == RANDOM]
    glue = glue_results(work, glue_names, args.tasks, args.seeds)
    common = [sd for sd in args.seeds if all(sd in glue.get(n, {}).get(t, {}) for n in glue_names for t in args.tasks)]
    machine = {"cpu": cpu_description(), **{f"lscpu_{k}": v for k, v in lscpu().items()}}
    runs: dict = {}
    lines = [f"# Equal compute, study `{args.study}`: {', '.join(names)} at `tiny` size", "",
             f"Machine: {machine['cpu']}; lscpu: {machine.get('lscpu_model', '?')}, {machine.get('lscpu_cpus', '?')} "
             "CPUs.", "", f"CPU flags (lscpu): `{machine.get('lscpu_flags', '?')}`", "",
             f"Each run pretrained for {args.minutes:g} minutes of the same total compute (a warm start's MLM minutes "
             "count), all at the same time, one thread each, so each got the same share of the cores.", "",
             "## Pretraining and health at the end", "",
             "| run | objective | recipe | steps | tokens (warm start) | tokens/s | AUC vs own generator | energy AUC "
             "| unigram-noise AUC | token cosine | gen NLL (unigram) | collapse rule |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    vals, switches = {}, {}
    for name in names:
        cfg, train, val = read_metrics(work / name)
        recipe = args.recipes[name]
        h = read_json(work / "health" / f"{name}.json") or {**(val[-1] if val else {}), "tokens": train[-1]["tokens"],
                                                             "minutes": train[-1]["elapsed_s"] / 60, "source": "metrics"}
        warm = h.get("warm_start") or {}
        switches[name], vals[name] = warm.get("tokens"), val
        collapsed = next((r["step"] for r in val if r.get("collapsed") or collapse_reasons_in(r)), None)
        recipe_text = f"lr {cfg['lr']:g}" + (f", {' '.join(recipe.flags)}" if recipe.flags else "") + \
            (f", gen lr {cfg['gen_lr']:g}" if cfg.get("gen_lr") and "--gen-lr" not in recipe.flags else "")
        avg = glue_average(glue.get(name, {}), args.tasks, common)
        runs[name] = {"objective": recipe.objective, "recipe": recipe_text, "tokens": h["tokens"],
                      "unigram_noise_auc": h.get("val_unigram_noise_auc"), "own_generator_auc": h.get("val_disc_auc"),
                      "token_cosine": h.get("val_token_cosine"),
                      "blimp12": {m: {"accuracy": rep["overall"]["accuracy"], "seconds": rep["seconds"]}
                                  for m, rep in blimp.get(name, {}).items()},
                      "atis_wer": {m: row[row["chosen"]]["test"] for m, row in atis.get(name, {}).items()},
                      "glue_average": avg}
        warm_tokens = f" ({warm['tokens']:,})" if warm else ""
        lines.append(f"| {name} | {recipe.objective} | {recipe_text} | {h.get('steps', train[-1]['step']):,} | {h['tokens']:,}{warm_tokens} "
                     f"| {h['tokens'] / max(60 * h['minutes'], 1e-9):,.0f} | {fmt(h.get('val_disc_auc'), 1, 3)} "
                     f"| {fmt(h.get('val_energy_auc'), 1, 3)} | {fmt(h.get('val_unigram_noise_auc'), 1, 3)} "
                     f"| {fmt(h.get('val_token_cosine'), 1, 3)} | {fmt(h.get('val_gen_nll'), 1, 2)} "
                     f"({fmt(h.get('val_unigram_nll'), 1, 2)}) | {f'fired at step {collapsed}' if collapsed else 'never'} |")
    curves = out.with_name(f"{out.stem}_curves.png")
    if vals:
        plot_curves(vals, switches, curves)
        lines += ["", f"Health against tokens seen: `{display(curves)}`. Unigram-noise AUC: the discriminator's ranking "
                  "of tokens replaced by fixed unigram samples (only context can detect them). AUC vs own generator: "
                  "its own generator's replacements (Electric: the corrected logit; energy AUC: s alone). The MLM run "
                  "and a warm start's MLM stage have no discriminator. Generator NLL: ELECTRA's generator (a frozen run: "
                  "the stage-1 MLM) and MLM at masked positions, Electric's cloze model at every candidate; the "
                  "warm-start MLM's before the switch. Health figures: "
                  + "; ".join(f"{n} {(read_json(work / 'health' / f'{n}.json') or {}).get('source', 'metrics.jsonl')}"
                              for n in names) + "."]
    if blimp:
        ref = boot["reference"].split("/") if boot else None
        ref_secs = blimp[ref[0]][ref[1]]["seconds"] if ref else None
        lines += ["", "## BLiMP-12, every method each run supports", "",
                  "| run | method | passes per sentence | accuracy | scoring time (s) | MLM PLL's time / this | − MLM PLL, "
                  "points [95% CI] | CPU busy before |", "|---|---|---|---:|---:|---:|---:|---:|"]
        for name, methods in blimp.items():
            for method, rep in methods.items():
                c = (boot or {}).get("comparisons", {}).get(f"{name}/{method}")
                lines.append(f"| {name} | {method} | {'one per token' if method == REFERENCE else 'one'} | "
                             f"{rep['overall']['accuracy']:.2f}% | {rep['seconds']:.1f} | "
                             f"{fmt(ref_secs / rep['seconds'] if ref_secs else None)}× | "
                             + (f"{c['diff_points']:+.2f} [{c['ci_points'][0]:+.2f}, {c['ci_points'][1]:+.2f}]" if c
                                else "–") + f" | {fmt(rep.get('cpu_busy_before'), 100, 0)}% |")
        n = next(iter(next(iter(blimp.values())).values()))
        lines.append(f"\nThe first {n['pairs_per_set']} pairs of each of the 12 sets ({n['overall']['pairs']:,} pairs); "
                     "time: scoring alone (model loaded and warmed up), 2 threads, one method after another; CPU busy "
                     f"before: the share of both cores in use in the second before the timing began. Interval: paired bootstrap over the pairs ({BOOTSTRAP['resamples']:,} resamples, "
                     f"seed {BOOTSTRAP['seed']}).")
    if atis:
        lines += ["", f"## ATIS reranking, adapted (the adaptation recipe, {args.atis_epochs:g} epochs)", "",
                  f"ATIS test ({atis_head['num_test']} utterances): first hypothesis {atis_head['first']:.2f}%, "
                  f"first pass + word bonus {atis_head['first_pass_plus_words']:.2f}%, oracle {atis_head['oracle']:.2f}%. "
                  "Weights tuned on the held-out third of ATIS train, never on test.", "",
                  "| run | method | LM score (chosen on dev) | test WER | dev WER | test scoring time (s) |",
                  "|---|---|---|---:|---:|---:|"]
        for name, methods in atis.items():
            for method, row in methods.items():
                c = row[row["chosen"]]
                lines.append(f"| {name} | {method} | {row['chosen']} | {c['test']:.2f}% | {c['dev']:.2f}% | "
                             f"{row['test_seconds']:.1f} |")
        lines.append("\nAdaptation: `training.pretrain --init-from RUN` with the run's objective on the ATIS adaptation text "
                     f"({args.atis_epochs:g} epochs, lr 1e-3, one thread), the generator trained jointly in every run (a "
                     "frozen-generator run's full-size stage-1 MLM is trained too: --init-from has no frozen mode).")
        lines.append("\nScoring times: one thread, beside a fine-tuning lane (not alone; the BLiMP times are the speed "
                     "figures). Only adapted models are scored (in the defaults study neither unadapted LM added "
                     "anything over the word bonus).")
    lines += glue_section(args, glue, glue_names, common)
    lines += [""] + targets(runs, boot, blimp)
    lines += ["", "## Commands", "", "Pretraining (side by side):", "", "```", *commands, "```"]
    stages = [json.loads(x) for x in (work / "stages.jsonl").read_text().splitlines()] \
        if (work / "stages.jsonl").is_file() else []
    if stages:
        lines += ["", "Stages (UTC start, in order):", "", "```",
                  *(f"{s['utc']}  {' '.join(s['argv'])}" for s in stages), "```"]
    jobs = read_json(work / "jobs.json") or {}
    bad = {k: v for k, v in jobs.items() if not v.startswith("done")}
    if bad:
        lines += ["", "Jobs that did not finish:", "", *(f"- {k}: {v}" for k, v in bad.items())]
    summary = {"runs": runs, "machine": machine, **({"bootstrap": boot} if boot else {})}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    print("\n".join(lines))
    print(f"wrote {out}")


def glue_section(args, glue: dict, names: list[str], common: list[int]) -> list[str]:
    """The GLUE table: mean ± sd per task over the seeds each model finished, the average over `common`."""
    prev = read_json(PREVIOUS) if RANDOM not in names else None
    if not glue and not prev:
        return []
    lines = ["", "## GLUE dev (fine-tuned, one fixed recipe)", "",
             f"Recipe for every model: {args.glue_examples:,} training examples per task (fixed seeded sample), "
             f"{args.glue_epochs} epochs, finetune's defaults otherwise (lr 3e-4 for hidden ≤ 256, layer-wise decay 0.8, "
             "warmup 10%, batch 32, the epoch kept by dev score), one thread per run. Mean ± sd over the seeds "
             f"finished; x100. Average (the `glue_average`): over seeds {common or 'none'}, the ones every model "
             f"finished{'' if common == args.seeds else f' (of {args.seeds}: the rest did not finish in the budget)'}.",
             "", "| model | " + " | ".join(f"{t} {AVERAGE[t]}" for t in args.tasks) + " | average |",
             "|---|" + "---:|" * (len(args.tasks) + 1)]
    rows = {n: {t: [d[AVERAGE[t]] for d in glue.get(n, {}).get(t, {}).values()] for t in args.tasks} for n in names}
    if prev and RANDOM in prev.get("glue", {}):
        rows[f"{RANDOM} (defaults study, same recipe)"] = {t: prev["glue"][RANDOM]["per_task"].get(t, [])
                                                           for t in args.tasks}
    for name, per_task in rows.items():
        cells = []
        for t in args.tasks:
            v = per_task[t]
            sd = statistics.stdev(v) if len(v) > 1 else 0.0
            cells.append(f"{100 * statistics.mean(v):.1f} ± {100 * sd:.1f}"
                         + ("" if len(v) == len(args.seeds) else f" ({len(v)} seed{'s' if len(v) > 1 else ''})") if v else "–")
        avg = glue_average(glue.get(name, {}), args.tasks, common) if name in glue else \
            (100 * statistics.mean(statistics.mean(per_task[t]) for t in args.tasks)
             if all(per_task[t] for t in args.tasks) else None)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {fmt(avg)} |")
    return lines
