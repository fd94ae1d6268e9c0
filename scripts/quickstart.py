"""The whole chain on a small default, in a few minutes on 2 CPU cores:

    python scripts/quickstart.py                      # data from ../shared/data
    python scripts/quickstart.py --minutes 5 --data my_corpus.txt --shared /path/to/shared/data

1. train a WordPiece tokenizer and a `tiny` Electric model (`--minutes` of training; its two-tower cloze model
   at its own lr, 1e-3 at `tiny`) on Wikipedia text plus two thirds of the ATIS training references (in-domain
   text is what helps a small model rerank; DESIGN §4); and print one line on what its health figures mean
   (docs/pretraining.md "Training health");
2. export the scorer to ONNX with int8 quantisation (`electric export`), checking parity on real sentences (SST-2
   dev from the shared data): by default the cloze model (`--scorer cloze`: log q(x_t | x without t) at every
   token in one pass, the best one-pass reranker measured on ATIS, BENCHMARKS.md "Equal compute v3"), or the
   energy model (`--scorer electric`, with /v1/detect's calibration fitted on those sentences, loud when it saw
   too few tokens);
3. start `electric serve` on a loopback port;
4. POST the other third of the ATIS training n-best lists to /v1/rerank to get LM scores (and to /v1/score
   for the pieces each hypothesis has), tune the weights on them (electric.evaluation.nbest.tune_guarded), then
   POST `--utterances` ATIS test lists with those weights and print the WER of the first hypothesis, without
   the LM (the first-pass score with a word and a piece bonus tuned on the same dev lists: the length every
   LM score carries for free, so how much of the gain needs no LM), of the reranked one, and of the oracle;
5. stop the server (SIGTERM: it drains and exits).

Everything lands in --work (default runs/quickstart); a second run reuses the model (--retrain to redo).
"""

from __future__ import annotations

import argparse
import json
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


def read_lists(path: Path) -> list[dict]:
    return json.loads(path.read_text())


def prepare_text(args, work: Path, atis_train: list[dict]) -> list[str]:
    """Training text files: the user's --data, else a slice of Wikipedia; plus 2/3 of the ATIS references."""
    files = list(args.data or [])
    if not files:
        wiki = work / "wiki_sample.txt"
        with open(Path(args.shared) / "corpus" / "enwiki" / "wiki_00", encoding="utf-8") as f:
            wiki.write_text("".join(islice(f, 2500)), encoding="utf-8")
        files.append(str(wiki))
    refs = work / "atis_train_refs.txt"
    n_train = len(atis_train) * 2 // 3
    # one reference a line, a blank line between small groups (documents of about 20 sentences)
    lines = [u["output"] for u in atis_train[:n_train]]
    refs.write_text("\n\n".join("\n".join(lines[i:i + 20]) for i in range(0, len(lines), 20)) + "\n", encoding="utf-8")
    return [*files, str(refs)]


def train(args, work: Path, text_files: list[str]) -> Path:
    from training.pretrain import main as pretrain
    from training.tokenizer import train_tokenizer

    tok = work / "tokenizer"
    if not (tok / "tokenizer.json").is_file():
        log("training a WordPiece tokenizer (8,000 pieces)")
        train_tokenizer(text_files, vocab_size=8000, out=tok, overwrite=True)
    run = work / "electric-tiny"
    log(f"pretraining a tiny Electric model for {args.minutes:g} minutes ({args.precision})")
    rc = pretrain(["--objective", "electric", "--preset", "tiny", "--data", *text_files, "--tokenizer", str(tok),
                   "--out", str(run), "--time-budget", str(args.minutes), "--precision", args.precision,
                   "--num-proc", "1", "--overwrite", "--max-seq-length", "64", "--warmup-steps", "100"])
    if rc != 0:
        raise SystemExit(f"pretraining failed ({rc})")
    return run


def health_line(run: Path) -> str | None:
    """One line on what the last evaluation's health figures (RUN/metrics.jsonl, `val_*`) mean for this model, or
    None when the run logged none."""
    rows = []
    metrics = run / "metrics.jsonl"
    if metrics.is_file():
        rows = [r for r in map(json.loads, metrics.read_text().splitlines()) if "val_disc_auc" in r]
    if not rows:
        return None
    r = rows[-1]
    auc, gen, uni = r["val_disc_auc"], r.get("val_gen_nll"), r.get("val_unigram_nll")
    parts = [f"discriminator AUC {auc:.2f} " + ("(it tells replaced tokens from original ones)" if auc >= 0.75 else
                                                "(below 0.75: it has not learned to tell replaced tokens from "
                                                "original ones; usual in minutes on a CPU)")]
    if "val_energy_auc" in r:
        parts.append(f"energy AUC {r['val_energy_auc']:.2f} (the energy alone, without the cloze model's log q)")
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


def rerank(url: str, utts: list[dict], weights: dict | None = None) -> dict:
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


def piece_counts(url: str, utts: list[dict]) -> list[list[float]]:
    """Per hypothesis (in the list's own order) the number of pieces the LM scores, from POST /v1/score."""
    import httpx

    texts = list(dict.fromkeys(h for u in utts for h in u["input"]))
    n: dict[str, float] = {}
    for lo in range(0, len(texts), 500):
        chunk = texts[lo: lo + 500]
        r = httpx.post(f"{url}/v1/score", json={"texts": chunk, "truncate": True}, timeout=300)
        if r.status_code != 200:
            raise SystemExit(f"/v1/score answered {r.status_code}: {r.text}")
        n.update((t, float(res["num_tokens"])) for t, res in zip(chunk, r.json()["results"], strict=True))
    return [[n[h] for h in u["input"]] for u in utts]


def lm_scores(results: list[dict], utts: list[dict]) -> list[list[float]]:
    """Per hypothesis (in the list's own order) LM score, from the rerank response."""
    out = []
    for res, u in zip(results, utts, strict=True):
        s = [0.0] * len(u["input"])
        for h in res["hyps"]:
            s[h["rank"]] = h["lm"]
        out.append(s)
    return out


APPLIED_AS = {"lm": "with the LM", "no_lm": "the no-LM combination: the LM's dev gain was not significant",
              "first_pass": "the first pass: no dev gain was significant"}


def summarise_test(utts: list[dict], results: list[dict], no_lm, took: float,
                   pieces: list[list[float]] | None = None, applied: str = "lm") -> str:
    """WER of the ATIS test lists: first hypothesis, without the LM (`no_lm`: weights with lm 0 and a word and
    piece bonus tuned on dev; `pieces` per hypothesis when its piece bonus is not 0), after /v1/rerank
    (`results`, with the combination the guard `applied`: "lm", "no_lm" or "first_pass"), oracle."""
    import numpy as np

    from electric.evaluation.nbest import Components, Evaluator, NBestList, make_metric

    lists = [NBestList(u["id"], u["input"], u["am_score"], u["output"]) for u in utts]
    ev = Evaluator(lists, make_metric("wer"))
    chosen = np.array([res["order"][0] for res in results])
    before, after, oracle = ev.first(), ev.score_selection(chosen), ev.oracle()
    without_lm = ev.score_selection(ev.select(Components.of(lists, lm_scores(results, utts), pieces).totals(no_lm)))
    changed = int((chosen != 0).sum())
    piece = f" and {no_lm.piece:g}/piece" if no_lm.piece else ""
    return "\n".join([
        f"ATIS test, {len(lists)} utterances (Whisper 5-best), reranked by the server in {took:.1f} s:",
        f"  WER before (first hypothesis): {before:.2f}%",
        f"  WER without the LM:            {without_lm:.2f}%   (first-pass score + a bonus of {no_lm.length:g}/word"
        f"{piece}, tuned on dev)",
        f"  WER after  (/v1/rerank):       {after:.2f}%   ({APPLIED_AS[applied]}; {changed} utterances changed their "
        "best hypothesis)",
        f"  oracle WER:                    {oracle:.2f}%"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--shared", default=str(shared_data_dir()),
                    help="the shared data folder (default $ELECTRIC_SHARED_DATA, else ../shared/data)")
    ap.add_argument("--data", nargs="+", help="your own training text (default: a slice of shared Wikipedia)")
    ap.add_argument("--minutes", type=float, default=3.0, help="pretraining time budget (default 3)")
    ap.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                    help="auto (default): bf16 autocast on GPUs and CPUs with native bf16 (AVX-512 BF16/AMX), fp32 "
                         "elsewhere (on AVX2-only CPUs bf16 is far slower than fp32)")
    ap.add_argument("--scorer", choices=("cloze", "electric"), default="cloze",
                    help="what the server scores with: cloze (default; the cloze model's log q, one pass) or electric "
                         "(the energy model's -s_t, one pass)")
    ap.add_argument("--utterances", type=int, default=100, help="ATIS test utterances to rerank (default 100)")
    ap.add_argument("--work", default=str(REPO / "runs" / "quickstart"))
    ap.add_argument("--retrain", action="store_true", help="train again even if --work has a model")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    nbest_dir = Path(args.shared) / "nbest"
    atis_train = read_lists(nbest_dir / "atis_train.whisper5best.json")
    atis_test = read_lists(nbest_dir / "atis_test.whisper5best.json")[: args.utterances]
    dev = atis_train[len(atis_train) * 2 // 3:]  # the references not used for training

    onnx_dir = work / ("electric-tiny-cloze-onnx" if args.scorer == "cloze" else "electric-tiny-onnx")
    run = work / "electric-tiny"
    if args.retrain or not (run / "state" / "trainer.pt").is_file():
        run = train(args, work, prepare_text(args, work, atis_train))
    else:
        log(f"reusing {run} (pass --retrain to train again)")
    if args.retrain or not (onnx_dir / "electric.json").is_file():
        onnx_dir = export(run, args.scorer, onnx_dir, Path(args.shared))
    line = health_line(run)
    if line:
        log(line)

    from electric.evaluation.nbest import Components, Evaluator, NBestList, make_metric, tune_guarded

    server = Server(onnx_dir, work)
    try:
        server.wait_ready()
        log(f"POST /v1/rerank: {len(dev)} dev lists (ATIS train, held out from training) to tune the weights")
        dev_lists = [NBestList(u["id"], u["input"], u["am_score"], u["output"]) for u in dev]
        dev_lm = lm_scores(rerank(server.url, dev), dev)
        dev_pieces = piece_counts(server.url, dev)
        ev_dev = Evaluator(dev_lists, make_metric("wer"))
        dev_comps = Components.of(dev_lists, dev_lm, dev_pieces)
        # the LM is kept only when its dev gain over the first pass with word and piece bonuses is significant,
        # and those bonuses only when their own dev gain over the first pass is
        guarded = tune_guarded(ev_dev, dev_comps)
        tuned, no_lm, guard, guard_no_lm = guarded.with_lm, guarded.without_lm, guarded.guard, guarded.no_lm_guard
        log(f"tuned with the LM: lm {tuned.weights.lm:g}, word bonus {tuned.weights.length:g}/word (dev WER "
            f"{ev_dev.first():.2f}% -> {tuned.dev_score:.2f}%)")
        log(f"tuned without the LM: word bonus {no_lm.weights.length:g}/word, piece bonus {no_lm.weights.piece:g}"
            f"/piece (dev WER {no_lm.dev_score:.2f}%)")
        log(f"the no-LM bonuses' dev gain over the first pass {guard_no_lm['gain']:.2f} points, "
            f"{guard_no_lm['confidence']:.0%} interval [{guard_no_lm['ci'][0]:.2f}, {guard_no_lm['ci'][1]:.2f}]: "
            + ("bonuses kept" if guard_no_lm["significant"] else "not significant, the first pass is kept"))
        log(f"the LM's dev gain over that no-LM combination {guard['gain']:.2f} points, {guard['confidence']:.0%} "
            f"interval [{guard['ci'][0]:.2f}, {guard['ci'][1]:.2f}]: "
            + ("LM kept" if guard["significant"] else "not significant, the LM is NOT used"))
        applied = guarded.weights  # sent as is: the server applies every weight the tuning can choose
        log(f"POST /v1/rerank: {len(atis_test)} ATIS test lists with the applied weights ({guarded.applied}: "
            f"lm {applied.lm:g}, {applied.length:g}/word, {applied.piece:g}/piece)")
        t_req = time.monotonic()
        results = rerank(server.url, atis_test, applied.to_dict())
        took = time.monotonic() - t_req
        test_pieces = piece_counts(server.url, atis_test)
    finally:
        server.stop()

    print()
    print(summarise_test(atis_test, results, no_lm.weights, took, test_pieces, guarded.applied))
    print(f"done in {(time.monotonic() - t0) / 60:.1f} minutes; model in {onnx_dir}, server log in {work / 'server.log'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
