"""The report of research/from_checkpoint/from_checkpoint.py: Markdown and JSON from its work dir, the health curves beside them,
and the study's targets (a)-(e) stated as met or missed with their figures.

JSON: {"runs": {NAME: {"objective", "recipe", "tokens", "unigram_noise_auc", "token_cosine", "disc_auc",
"blimp12": {METHOD: {"accuracy" (percent), "seconds"}}, "atis_wer_unadapted": {METHOD: pct}, "ls_clean_wer":
{"first", "no_lm", METHOD: pct}, "wsj_wer": {...}, "fce_detect_auc", "glue_average" (x100), "nbest_detail"}},
"bootstrap": {...}, "machine": {"cpu", "flags"}}; null where not measured.
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path

from electric.hardware import cpu_description
from research.equal_compute.equal_compute_report import (
    blimp_results,
    bootstrap,
    display,
    fmt,
    glue_average,
    glue_results,
    lscpu,
    plot_curves,
    read_json,
    read_metrics,
)
from research.first_tiny_runs.glue_compare import AVERAGE

NBEST_SETS = {  # name -> its file under nbest/, the JSON key of its WERs, its title
    "ls_clean": {"file": "librispeech_test_clean.whisper5best.json", "key": "ls_clean_wer",
                 "title": "LibriSpeech test-clean"},
    "wsj": {"file": "wsj_eval.whisper5best.json", "key": "wsj_wer", "title": "WSJ eval"},
    "atis": {"file": "atis_test.whisper5best.json", "key": "atis_wer_unadapted", "title": "ATIS test, unadapted"},
}
CKPT_NOTE = ("the checkpoint is a sentence-transformers BertModel: no masked-LM head and no replaced-token head, so "
             "no scoring method applies to it unchanged (a fresh head would score at random)")


def fmt_int(v) -> str:
    return "–" if v is None else f"{v:,}"


def recipe_text(cfg: dict | None) -> str:
    if cfg is None:
        return "unchanged (no continued pretraining)"
    gen = f", gen lr {cfg['gen_lr']:g}" if cfg.get("objective") != "mlm" and cfg.get("gen_lr") else ""
    return (f"--init-from {cfg.get('init_from')}, preset {cfg.get('preset')} (the checkpoint's architecture), lr "
            f"{cfg['lr']:g}{gen}, {cfg.get('time_budget_minutes', 0):g} min budget, seed {cfg.get('seed')}")


def nbest_results(work: Path, names: list[str]) -> tuple[dict, list[str]]:
    """({set: {run: {method: result}}}, failures) from WORK/nbest/SET.NAME.METHOD.json."""
    res: dict = {}
    failed = []
    for f in sorted((work / "nbest").glob("*.json")):
        parts = f.name.split(".")
        if len(parts) != 4 or parts[0] not in NBEST_SETS or parts[1] not in names:
            continue
        r = json.loads(f.read_text())
        if "failed" in r:
            failed.append(f"{parts[0]} {parts[1]}/{parts[2]}: `{r['command']}` failed: {r['failed']}")
        else:
            res.setdefault(parts[0], {}).setdefault(parts[1], {})[parts[2]] = r
    order = {n: i for i, n in enumerate(names)}
    return {k: dict(sorted(v.items(), key=lambda kv: order[kv[0]])) for k, v in res.items()}, failed


def wer_summary(by_method: dict | None, with_first: bool) -> dict | None:
    """{"first", "no_lm" (from a full-set result when there is one), METHOD: test WER after the guard}."""
    if not by_method:
        return None
    base = next((r for r in by_method.values() if not r["limited"]), next(iter(by_method.values())))
    head = {"first": base["test"]["first"], "no_lm": base["test"]["no_lm"]} if with_first else {}
    return {**head, **{m: r["test"]["reranked"] for m, r in by_method.items()}}


def run_summary(args, name: str, blimp: dict, nbest: dict, glue: dict) -> dict:
    work = args.work
    h = read_json(work / "health" / f"{name}.json") or {}
    cfg = read_json(args.dirs[name] / "config.json") if name != "checkpoint" else None
    fce = read_json(work / "fce" / f"{name}.json") or {}
    tasks, seeds = args.glue_tasks, args.glue_seeds
    return {"objective": cfg["objective"] if cfg else "checkpoint", "recipe": recipe_text(cfg),
            "tokens": h.get("tokens"), "unigram_noise_auc": h.get("val_unigram_noise_auc"),
            "token_cosine": h.get("val_token_cosine"), "disc_auc": h.get("val_disc_auc"),
            "blimp12": {m: {"accuracy": r["overall"]["accuracy"], "seconds": r["seconds"]}
                        for m, r in blimp.get(name, {}).items()} or None,
            **{s["key"]: wer_summary(nbest.get(k, {}).get(name), k != "atis") for k, s in NBEST_SETS.items()},
            "fce_detect_auc": fce.get("roc_auc"),
            "glue_average": glue_average(glue.get(name, {}), tasks, seeds),
            "nbest_detail": {k: {m: {x: r[x] for x in ("lists", "limited", "prior", "applied", "lm_used", "seconds",
                                                       "test", "command")} for m, r in nbest[k][name].items()}
                             for k in nbest if name in nbest[k]} or None}


# ---- sections ------------------------------------------------------------------------------------------

def health_section(args, runs: dict) -> list[str]:
    lines = ["## Health at the end of continued pretraining", "",
             "| run | objective | recipe | tokens | unigram-noise AUC | token cosine | AUC vs own generator | source |",
             "|---|---|---|---:|---:|---:|---:|---|"]
    for name, r in runs.items():
        h = read_json(args.work / "health" / f"{name}.json") or {}
        src = h.get("source", "not measured (health stage not run)")
        if name == "checkpoint" and h.get("probe"):
            p = h["probe"]
            at = f"last AUC at step {p['step']}, {p['tokens']:,} tokens" if p.get("auc") is not None else "no AUC"
            src = (f"AUC: fixed_noise_probe, encoder frozen, a fresh head trained {p.get('minutes')} min ({at}): "
                   f"`{p['command']}`"
                   + (f" ({p['note']})" if p.get("note") else "") + "; token cosine: training.evaluation.evaluate on "
                   "the unchanged encoder, same validation slice")
        lines.append(f"| {name} | {r['objective']} | {r['recipe']} | {fmt_int(r['tokens'])} "
                     f"| {fmt(r['unigram_noise_auc'], 1, 3)} | {fmt(r['token_cosine'], 1, 3)} | {fmt(r['disc_auc'], 1, 3)} "
                     f"| {src} |")
    return lines + ["", "Unigram-noise AUC: the discriminator ranks tokens replaced by fixed unigram draws (only "
                    "context can find them); an MLM run has no discriminator. The checkpoint's figure is a probe (its "
                    "frozen encoder under a head trained for the purpose), not a pretrained head's."]


def blimp_section(blimp: dict, boot: dict | None) -> list[str]:
    if not blimp:
        return []
    ref = boot["reference"].split("/") if boot else None
    ref_secs = blimp[ref[0]][ref[1]]["seconds"] if ref else None
    lines = ["", "## BLiMP-12", "", "| run | method | accuracy | scoring time (s) | MLM PLL's time / this | − MLM PLL, "
             "points [95% CI] |", "|---|---|---:|---:|---:|---:|"]
    for name, methods in blimp.items():
        for method, rep in methods.items():
            c = (boot or {}).get("comparisons", {}).get(f"{name}/{method}")
            ci = f"{c['diff_points']:+.2f} [{c['ci_points'][0]:+.2f}, {c['ci_points'][1]:+.2f}]" if c else "–"
            lines.append(f"| {name} | {method} | {rep['overall']['accuracy']:.2f}% | {rep['seconds']:.1f} | "
                         f"{fmt(ref_secs / rep['seconds'] if ref_secs else None)}× | {ci} |")
    rep = next(iter(next(iter(blimp.values())).values()))
    return lines + ["", f"First {rep['pairs_per_set']} pairs of each of the 12 sets ({rep['overall']['pairs']:,} pairs); "
                    "time: scoring alone (model loaded and warmed up), 2 threads; CPU busy in the second before the "
                    "first timing: " + ", ".join(f"{n}/{m} {fmt(r.get('cpu_busy_before'), 100, 0)}%"
                                                  for n, ms in blimp.items() for m, r in ms.items())
                    + f". Made by `{rep.get('command')}`: equal_compute.stage_blimp per run and method."]


def nbest_section(nbest: dict) -> list[str]:
    lines = []
    for key, sets in NBEST_SETS.items():
        if key not in nbest:
            continue
        lines += ["", f"## {sets['title']}: guarded reranking (test half)", "",
                  "| run | method | lists | prior | first | no LM | reranked (after the guard) | LM applied | dev gain "
                  "of the LM [95% CI] | time (s), threads |", "|---|---|---:|---|---:|---:|---:|---|---:|---:|"]
        cmds = []
        for name, methods in nbest[key].items():
            for method, r in methods.items():
                t, g = r["test"], r["guard"]
                lim = f"{r['lists']} (first {r['lists']} only)" if r["limited"] else str(r["lists"])
                lines.append(f"| {name} | {method} | {lim} | {r['prior']} | {t['first']:.2f}% | {t['no_lm']:.2f}% | "
                             f"{t['reranked']:.2f}% | {'yes' if r['lm_used'] else 'no (' + r['applied'] + ')'} | "
                             f"{g['gain']:+.2f} [{g['ci'][0]:+.2f}, {g['ci'][1]:+.2f}] | {r['seconds']:.0f}, {r.get('threads', 1)} |")
                cmds.append(r["command"])
        lines += ["", "Commands (time: the whole command, loading and tuning included):", "", "```", *cmds, "```"]
    if nbest:
        lines += ["", "Prior: `none` where every list carries first-pass scores (WSJ `score`, ATIS `am_score`: the first "
                  "pass plus bonuses, no rank term), `rank` where none does (LibriSpeech: Whisper's beam order, -beta * "
                  "rank). Dev: a seeded half of the lists (seed 0); the guard keeps the LM only when its dev gain over "
                  "no-LM is significant (paired bootstrap), and no-LM only when it beats the first pass the same way."]
    if any(r["limited"] for s in nbest.values() for ms in s.values() for r in ms.values()):
        lines += ["", "A row marked *first N only* reranked the first N lists of the set (the dev/test halves of those "
                  "N): its first / no-LM / reranked WERs are on a different test half from the full-set rows."]
    return lines


def fce_section(args) -> list[str]:
    rows = {n: read_json(args.work / "fce" / f"{n}.json") for n in ("electric", "electra") if n in args.dirs}
    rows = {n: r for n, r in rows.items() if r and "failed" not in r}
    if not rows:
        return []
    lines = ["", "## FCE zero-shot error detection", "", "| run | ROC-AUC | F0.5 (dev threshold) | F0.5 flagging all | "
             "test sentences | words | time (s) |", "|---|---:|---:|---:|---:|---:|---:|"]
    for n, r in rows.items():
        lines.append(f"| {n} | {r['roc_auc']:.4f} | {r['f0.5']:.4f} | {r['f0.5_all_incorrect']:.4f} | {r['sentences']} "
                     f"| {r['words']} | {r['seconds']:.0f} |")
    return lines + ["", "Commands:", "", "```", *(r["command"] for r in rows.values()), "```"]


def glue_section(args, glue: dict) -> list[str]:
    if not glue:
        return []
    lines = ["", "## GLUE dev (fine-tuned with lr 1e-4; the other settings are in the commands)",
             "", "| model | " + " | ".join(f"{t} {AVERAGE[t]} (seeds)" for t in args.glue_tasks) + " | average |",
             "|---|" + "---:|" * (len(args.glue_tasks) + 1)]
    cmds, minutes = [], 0.0
    for name, by_task in glue.items():
        cells = [", ".join(f"{100 * by_task[t][s][AVERAGE[t]]:.1f}" for s in sorted(by_task.get(t, {}))) or "–"
                 for t in args.glue_tasks]
        avg = glue_average(by_task, args.glue_tasks, args.glue_seeds)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {fmt(avg)} |")
        for t in args.glue_tasks:
            for s in sorted(by_task.get(t, {})):
                run = args.work / "glue" / name / t / f"seed{s}"
                cmds.append("python -m training.finetune " + shlex.join(json.loads((run / "argv.json").read_text())))
                minutes += json.loads((run / "eval.json").read_text()).get("elapsed_s", 0.0) / 60
    return lines + ["", f"Commands ({minutes:.1f} min of fine-tuning in all):", "", "```", *cmds, "```"]


# ---- targets -------------------------------------------------------------------------------------------

def verdict(oks: list[bool]) -> str:
    if not oks:
        return "**not measured**"
    return "**met**" if all(oks) else "**missed**" if not any(oks) else f"**partly met** ({sum(oks)} of {len(oks)})"


def targets(args, runs: dict, blimp: dict, boot: dict | None, nbest: dict) -> list[str]:
    """The study's targets (a)-(e), each met or missed with its figures."""
    discs = {n: r["unigram_noise_auc"] for n, r in runs.items()
             if n in ("electric", "electra") and r["unigram_noise_auc"] is not None}
    fce = {n: r["fce_detect_auc"] for n, r in runs.items() if r["fce_detect_auc"] is not None}
    return ["", "## Targets", "",
            f"- **(a)** unigram-noise AUC ≥ 0.90 for the continued discriminators: "
            f"{verdict([v >= 0.9 for v in discs.values()])} — {listing(discs, 3)}.",
            target_b(blimp, boot),
            *(target_c(key, nbest.get(key, {})) for key in ("ls_clean", "wsj")),
            f"- **(d)** FCE zero-shot AUC ≥ 0.70: {verdict([v >= 0.7 for v in fce.values()])} — {listing(fce, 4)}.",
            target_e(args, runs)]


def listing(figures: dict, digits: int) -> str:
    return "; ".join(f"{n} {v:.{digits}f}" for n, v in figures.items()) or "no figures"


def target_b(blimp: dict, boot: dict | None) -> str:
    if not boot:
        return "- **(b)** BLiMP-12: **not measured** (needs the mlm run's mlm-pll and a one-pass method)."
    best, ref = boot["best_one_pass"], boot["reference"]
    c = boot["comparisons"][best]
    (bn, bm), (rn, rm) = best.split("/"), ref.split("/")
    acc, ref_acc = blimp[bn][bm]["overall"]["accuracy"], blimp[rn][rm]["overall"]["accuracy"]
    secs, ref_secs = blimp[bn][bm]["seconds"], blimp[rn][rm]["seconds"]
    ratio = ref_secs / secs if secs > 0 else math.inf
    ok = c["diff_points"] >= 0 and ratio >= 10 and acc >= 75
    lo, hi = c["ci_points"]
    return (f"- **(b)** best one-pass method ≥ MLM PLL on BLiMP-12, ≥ 10× less scoring time, and ≥ 75%: "
            f"{verdict([ok])} — {best} {acc:.2f}% vs {ref} {ref_acc:.2f}%: {c['diff_points']:+.2f} points, 95% "
            f"paired-bootstrap interval [{lo:+.2f}, {hi:+.2f}] ({'excludes' if c['significant'] else 'includes'} 0); "
            f"{secs:.1f} s vs {ref_secs:.1f} s ({ratio:.1f}× less); ≥ 75%: {'yes' if acc >= 75 else 'no'}. The best is "
            f"chosen among {len(boot['comparisons'])} one-pass methods on these pairs (its interval is a little "
            "optimistic).")


def target_c(key: str, by_run: dict) -> str:
    """Met when some (run, method) has the LM applied by the guard and a test WER ≥ 5% relative below no-LM."""
    rows = {f"{n}/{m}": r for n, ms in by_run.items() for m, r in ms.items()}
    head = f"- **(c) {NBEST_SETS[key]['title']}**: the guard applies the LM and test WER ≥ 5% relative below no-LM: "
    if not rows:
        return head + "**not measured**."
    figs = []
    for k, r in rows.items():
        t = r["test"]
        rel = 100 * (1 - t["reranked"] / t["no_lm"]) if t["no_lm"] else 0.0
        limit = f", first {r['lists']} lists" if r["limited"] else ""
        applied = f"LM applied, {rel:+.1f}% rel." if r["lm_used"] else f"LM not applied: the guard kept {r['applied']}"
        figs.append(f"{k} {t['reranked']:.2f}% vs no LM {t['no_lm']:.2f}% ({applied}{limit})")
    met = [k for k, r in rows.items() if r["lm_used"] and r["test"]["reranked"] <= 0.95 * r["test"]["no_lm"]]
    return head + (f"**met** (by {', '.join(met)})" if met else "**missed**") + f" — {'; '.join(figs)}."


def target_e(args, runs: dict) -> str:
    e, c = (runs.get(n, {}).get("glue_average") for n in ("electra", "checkpoint"))
    head = "- **(e)** continued ELECTRA's GLUE ≥ the unchanged checkpoint's: "
    if e is not None and c is not None:
        return head + f"{verdict([e >= c])} — electra {e:.1f}, checkpoint {c:.1f}."
    why = (read_json(args.work / "glue" / "checkpoint.unsupported.json") or {}).get("reason")
    because = f"the checkpoint cannot be fine-tuned: {why}" if why else "a GLUE average is missing"
    return head + f"**not measured** — {because}" + (f" (electra: {e:.1f})" if e is not None else "") + "."


def not_measured(args, runs: dict, failures: list[str]) -> list[str]:
    lines = ["", "## Not measured, and why", "",
             f"- checkpoint: BLiMP, n-best reranking, FCE: {CKPT_NOTE}.",
             "- ATIS: reranked unadapted only (the adaptation recipe of research/adaptation/adapt_recipe.py is too slow at this "
             "model size on this CPU), hence `atis_wer_unadapted`."]
    why = (read_json(args.work / "glue" / "checkpoint.unsupported.json") or {}).get("reason")
    expected = {"health": list(runs), "fce": ["electric", "electra"], "glue": ["electra"] + ([] if why else ["checkpoint"])}
    for stage, key in (("health", "token_cosine"), ("fce", "fce_detect_auc"), ("glue", "glue_average")):
        missing = [n for n in expected[stage] if n in runs and runs[n][key] is None]
        if missing:
            lines.append(f"- {stage}: no figure for {', '.join(missing)} (stage not run yet, or failed: see below).")
    if why:
        lines.append(f"- GLUE of the checkpoint: `training.finetune` does not take it: {why}.")
    return lines + [f"- failed: {f}" for f in failures]


def write_report(args) -> None:
    """WORK -> args.out (.md), its .json twin and the curves PNG."""
    work, out = args.work, Path(args.out)
    names = list(args.dirs)
    trained = [n for n in names if n != "checkpoint"]
    blimp = blimp_results(work, trained)
    boot = bootstrap(blimp)
    nbest, failures = nbest_results(work, trained)
    failures += [f"fce {n}: `{r['command']}` failed: {r['failed']}" for n in trained
                 if "failed" in (r := read_json(work / "fce" / f"{n}.json") or {})]
    glue = glue_results(work, [n for n in ("checkpoint", "electra") if n in names], args.glue_tasks, args.glue_seeds)
    runs = {n: run_summary(args, n, blimp, nbest, glue) for n in names}
    flags = lscpu()
    machine = {"cpu": cpu_description(), "flags": flags.get("flags"), "lscpu_model": flags.get("model"),
               "cpus": flags.get("cpus")}
    lines = ["# Electric / ELECTRA / MLM continued from all-MiniLM-L6-v2", "",
             f"Machine: {machine['cpu']}; lscpu: {machine['lscpu_model']}, {machine['cpus']} CPUs.", "",
             f"CPU flags: `{machine['flags']}`", "", *health_section(args, runs)]
    vals = {n: read_metrics(args.dirs[n])[2] for n in trained if (args.dirs[n] / "metrics.jsonl").is_file()}
    if vals:
        curves = out.with_name(f"{out.stem}_curves.png")
        plot_curves(vals, {}, curves)
        lines += ["", f"Health against tokens seen: `{display(curves)}` (the dash-dot lines are the equal-compute "
                  "study's marks, 0.75 AUC and 0.9 cosine; target (a) here is AUC ≥ 0.90)."]
    lines += blimp_section(blimp, boot) + nbest_section(nbest) + fce_section(args) + glue_section(args, glue)
    lines += targets(args, runs, blimp, boot, nbest) + not_measured(args, runs, failures)
    stages = [json.loads(x) for x in (work / "stages.jsonl").read_text().splitlines()] \
        if (work / "stages.jsonl").is_file() else []
    given = Path(args.runs_dir) / "COMMANDS"
    lines += ["", "## Commands", "", "Continued pretraining (rebuilt from each run's config.json"
              + (f"; as given in {given}: `{given.read_text().strip()}`" if given.is_file() else "") + "):", "", "```",
              *(f"python -m training.pretrain {shlex.join(_argv(args.dirs[n]))}" for n in trained
                if (args.dirs[n] / "config.json").is_file()),
              "```", "", "This harness (UTC start, in order):", "", "```",
              *(f"{s['utc']}  {shlex.join(s['argv'])}" for s in stages), "```"]
    summary = {"runs": runs, "bootstrap": boot, "machine": {"cpu": machine["cpu"], "flags": machine["flags"]}}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    print("\n".join(lines))
    print(f"wrote {out}")


def _argv(run_dir: Path) -> list[str]:
    """The pretraining flags that matter, from the run's config.json."""
    cfg = json.loads((run_dir / "config.json").read_text())
    run = cfg.get("run", {})
    return ["--objective", cfg["objective"], "--preset", cfg["preset"], "--init-from", str(cfg.get("init_from")),
            "--lr", f"{cfg['lr']:g}", "--data", *run.get("data", []), "--time-budget", f"{cfg['time_budget_minutes']:g}",
            *(["--max-steps", str(cfg["max_steps"])] if cfg.get("max_steps") else []),
            *(["--threads", str(run["threads"])] if run.get("threads") else []), "--seed", str(cfg["seed"]),
            "--out", run.get("out", str(run_dir))]
