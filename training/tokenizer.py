"""Train a lower-cased WordPiece tokenizer with BERT's special tokens on local text.

    python -m training.tokenizer --data ../shared/data/corpus/enwiki --vocab-size 8000 --out runs/tok

The directory it writes loads with `transformers.AutoTokenizer.from_pretrained(dir)` and holds a
`vocab.txt`, so it is also a valid BERT/ELECTRA vocabulary for any other tool.
"""

from __future__ import annotations

import argparse
import sys
from itertools import islice
from pathlib import Path

from electric.checkpoint import atomic_dir
from electric.pretraining.data import DataError, iter_documents, resolve_files

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def train_tokenizer(data: list[str], vocab_size: int, out: str | Path, max_documents: int = 0,
                    min_frequency: int = 2, overwrite: bool = False):
    """Train WordPiece on the documents in `data` and save a transformers tokenizer directory to `out`."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertTokenizerFast  # type: ignore[attr-defined]  # an alias in transformers 5

    out = Path(out)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"output directory {str(out)!r} is not empty (pass --overwrite to replace it)")
    if vocab_size < len(SPECIAL_TOKENS) + 100:
        raise ValueError(f"--vocab-size {vocab_size} is too small (at least {len(SPECIAL_TOKENS) + 100})")
    files = resolve_files(data)
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, clean_text=True, handle_chinese_chars=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                        special_tokens=SPECIAL_TOKENS, continuing_subword_prefix="##",
                                        show_progress=sys.stderr.isatty())
    docs = iter_documents(files)
    if max_documents:
        docs = islice(docs, max_documents)
    seen = 0

    def counted():
        nonlocal seen
        for d in docs:
            seen += 1
            yield d

    tok.train_from_iterator(counted(), trainer=trainer)
    if seen == 0:
        raise DataError(f"no text in {len(files)} data file(s)")
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    fast = BertTokenizerFast(tokenizer_object=tok, do_lower_case=True, unk_token="[UNK]", pad_token="[PAD]",
                             cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
    fast.model_max_length = 512
    with atomic_dir(out) as tmp:
        fast.save_pretrained(tmp)
        vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
        (tmp / "vocab.txt").write_text("".join(f"{t}\n" for t, _ in vocab), encoding="utf-8")
    return fast, seen


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.tokenizer", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", nargs="+", required=True, help="text files, directories or globs (plain or WikiExtractor)")
    ap.add_argument("--vocab-size", type=int, default=8000,
                    help="WordPiece vocabulary size (default 8000, chosen for tiny: Electric's cloze head runs at "
                         "every position and trains 1.75x slower with 16k, BENCHMARKS.md; ELECTRA uses 30522)")
    ap.add_argument("--min-frequency", type=int, default=2, help="ignore pieces seen fewer times (default 2)")
    ap.add_argument("--max-documents", type=int, default=0, help="train on at most this many documents (0 = all)")
    ap.add_argument("--out", required=True, help="output directory (loads with AutoTokenizer.from_pretrained)")
    ap.add_argument("--overwrite", action="store_true", help="replace a non-empty output directory")
    args = ap.parse_args(argv)
    try:
        tok, n_docs = train_tokenizer(args.data, args.vocab_size, args.out, args.max_documents, args.min_frequency,
                                      args.overwrite)
    except (DataError, FileExistsError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"trained a {len(tok)}-token WordPiece vocabulary on {n_docs} documents -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
