#!/usr/bin/env bash
# The ready-made GPU run: pretraining throughput, Electric and the MLM baseline pretrained for the same minutes each
# (ELECTRA too with --objectives), their evaluation, the best discriminator brought back, and serving on the GPU - one
# command on a bare machine.
#
#   benchmarks/gpu_run.sh bundle                  # here, from the repository's root: writes gpu_bundle/
#   benchmarks/gpu_run.sh run [--minutes M] ...   # there: every stage under its own time limit
#   benchmarks/gpu_run.sh run --plan [...]        # anywhere: each stage's limit and their sum against the deadline
#
# The machine `run` needs, each limit one of the script's parameters:
#   - one CUDA GPU, PyTorch built for it, and CPython 3.12 on x86-64 Linux with transformers, tokenizers,
#     onnxruntime, numpy, pandas, pyarrow and grpcio; no network: everything else comes in gpu_bundle/
#   - the repository's files and gpu_bundle/ carried there together: at most bundle's --limit-mib (64 MiB)
#   - the command's time: run's --deadline-s (570 s: the defaults fit a machine held for ten minutes)
#   - what is brought back: run's --out, 5 files and the model's pieces of at most --piece-mib (15 MiB) in
#     OUT/model/, two folders deep
#
# bundle (needs pip to reach the package index, unless --no-wheels) puts into gpu_bundle/ (git-ignored) what a bare
# GPU machine with torch, transformers, tokenizers, onnxruntime, numpy, pandas, pyarrow and grpcio lacks:
#   wheels/       the project's other requirements for CPython 3.12 on manylinux x86_64 (pip download --no-deps), at
#                 the versions installed here (the ones the tests ran with)
#   wheels-old-pyarrow/  datasets 4.4.1 and its requirements, installed instead where the machine's pyarrow is < 24
#   tok/          a WordPiece tokenizer (--vocab-size, default 16,000) trained here on the corpus slice
#   data.tar.gz   data/ as ELECTRIC_SHARED_DATA expects it: as many enwiki files (corpus/enwiki/wiki_NN) as fit the
#                 transfer limit after the checkout, the wheels and the rest (all 100 when they fit), the n-best lists
#                 of ATIS test, WSJ and LibriSpeech, BLiMP's 12 sets, GLUE SST-2 and CoLA
# and prints the sizes: the checkout plus the bundle must stay under 64 MiB (--limit-mib).
#
# run installs the wheels into /tmp/site (PYTHONPATH), unpacks the data into WORK (default /tmp/gpu_run), then runs
# the stages in this order, each under `timeout` (a time limit, capped by what is left of --deadline-s):
#   throughput   benchmarks/bench_gpu_throughput.py, 30 timed steps a row: each of --throughput-objectives
#                (electric mlm electra) compile off, then each compiled with CUDA graphs (--throughput-compile off
#                cudagraphs), so a stage cut short keeps the cheap rows; a row also records its warm-up seconds
#   pretrain     python -m training.pretrain --objective X --preset P --time-budget M, for each of --objectives
#                (electric mlm), compiled as benchmarks/gpu_compile_choice.py chooses from the throughput rows: the
#                mode that reads the most tokens in M minutes once its compile time is paid (--pretrain-compile auto;
#                off, on or cudagraphs force one)
#   health       tokens and unigram-noise AUC of each run        \
#   blimp        BLiMP-12, one pass per method, then MLM PLL       | benchmarks/gpu_pretrain_report.py, into
#   rerank       guarded reranking of ATIS, WSJ, LibriSpeech       | OUT/gpu_pretrain.json
#   glue         SST-2 and CoLA dev after fine-tuning, with --glue /
#   bring-back   the best discriminator in bf16, in pieces of <= --piece-mib MiB, with its sha256 and command
#   serve        benchmarks/bench_gpu_serve.py: the torch server on the GPU, every route once, req/s and p50/p99
#                at concurrency 1, 16, 64, beside the CPU int8 server on the same model
# Every figure is written as it comes (each JSON is rewritten whole after each figure), so a stage that runs out of
# time loses its own unfinished figure, not the ones before it. A stage that fails prints one line
# (`STAGE name FAILED: ...`) and the next one runs.
#
# What --out holds at the end:
#   OUT/gpu_run.log  OUT/gpu_throughput.json  OUT/gpu_profile.txt  OUT/gpu_pretrain.json  OUT/gpu_serve.json
#   OUT/model/best.tar.00 ... (ELECTRA-Small's discriminator in bf16 is ~27 MB: 2 pieces of 15 MiB)
# Restore the model: cat best.tar.* > best.tar; check it against gpu_pretrain.json's bring_back.tar_sha256
# (sha256sum), then tar xf best.tar: a transformers ElectraForPreTraining folder with its tokenizer.
#
# Time: the stages' limits by default add up to 550 s of --deadline-s 570 (`run --plan` prints them): setup ~30 s,
# throughput <= 90 s (the six rows' compilation takes most of it: the compiled rows it has no time for are lost, the
# rest kept), 2 x 1.5 min of pretraining + 25 s each for its start and save (+ 30 s to tokenise the corpus, once),
# 105 s of evaluation, bring-back, serve. A stage that ends early leaves its time unused. A longer comparison is
# another run of about 9 minutes into the same --out, e.g. "benchmarks/gpu_run.sh run --minutes 2.75 --skip
# throughput serve" (its compile choice from the first run's throughput rows; `--plan` says whether limits fit).
#   here:   benchmarks/gpu_run.sh bundle
#   there:  benchmarks/gpu_run.sh run --out OUT      (or: benchmarks/gpu_run.sh run --minutes 1 --glue)
# then copy OUT's JSONs to benchmarks/results/. On a CPU (the test does this at tiny sizes):
#   benchmarks/gpu_run.sh run --device cpu --preset debug --minutes 0.05 --out /tmp/out ...

set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
REPO=$PWD
PY=${PYTHON:-python3}

usage() { sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
die() { echo "error: $*" >&2; exit 2; }
num() { [[ $2 =~ ^[0-9]+([.][0-9]+)?$ ]] || die "$1 expects a number, got '$2'"; }

# the project's requirements that the device's image lacks, or holds at a version the project may not work with
# (grpcio and protobuf: the generated gRPC stubs check both; typing-extensions: pydantic needs a recent one)
WHEELS=(fastapi fastapi-offline starlette annotated-doc opentelemetry-api pydantic pydantic-core pydantic-settings
        python-dotenv typing-inspection annotated-types typing-extensions uvicorn httptools grpcio
        grpcio-health-checking grpcio-reflection protobuf datasets dill multiprocess fsspec jiwer rapidfuzz)
# datasets' wheel above needs pyarrow >= 24; where the machine's pyarrow is older (pyarrow's own wheel, ~55 MB, does
# not fit the transfer beside the data), run installs instead this datasets (pyarrow >= 21, huggingface-hub < 2), which
# the project's data path was tested with, and the versions of its requirements it takes
OLD_PYARROW_WHEELS=(datasets==4.4.1 dill==0.4.0 multiprocess==0.70.18 fsspec==2025.10.0)
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64)

# ---- bundle --------------------------------------------------------------------------------------------------

bundle() {
    local out=gpu_bundle wheels=1 vocab=16000 limit_mib=64 corpus=() tok="" shared
    shared=$($PY -c "from electric.shared_data import shared_data_dir; print(shared_data_dir())") \
        || die "cannot run $PY with the project importable (set PYTHON=.venv/bin/python)"
    while (($#)); do
        case $1 in
            --out) out=$2; shift 2 ;;
            --no-wheels) wheels=0; shift ;;
            --vocab-size) vocab=$2; shift 2 ;;
            --limit-mib) num "$1" "$2"; limit_mib=$2; shift 2 ;;
            --shared) shared=$2; shift 2 ;;
            --corpus) shift; while (($#)) && [[ $1 != --* ]]; do corpus+=("$1"); shift; done ;;
            --tokenizer) tok=$2; shift 2 ;;
            -h|--help) usage ;;
            *) die "bundle: unknown option $1 (see --help)" ;;
        esac
    done
    [[ -d $shared ]] || die "no data folder at $shared (set ELECTRIC_SHARED_DATA)"
    rm -rf "$out" && mkdir -p "$out/stage/data/corpus/enwiki" "$out/stage/data/nbest" "$out/stage/data/glue" || exit 2

    if ((wheels)); then
        local specs=() name version
        for name in "${WHEELS[@]}"; do
            version=$($PY -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name" 2>/dev/null) \
                || die "$name is not installed here: install the project's dev extra first"
            specs+=("$name==$version")
        done
        local plat=() p
        for p in "${PLATFORMS[@]}"; do plat+=(--platform "$p"); done
        $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
            -d "$out/wheels" "${specs[@]}" || die "pip download failed"
        $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
            -d "$out/wheels-old-pyarrow" "${OLD_PYARROW_WHEELS[@]}" || die "pip download failed"
    fi

    local d=$out/stage/data
    cp "$shared"/nbest/{atis_test,wsj_eval,librispeech_test_clean}.whisper5best.json "$d/nbest/" || exit 2
    cp -r "$shared/blimp" "$d/blimp" || exit 2
    mkdir -p "$d/glue/sst2" "$d/glue/cola"
    cp "$shared"/glue/sst2/{train,dev}.tsv "$d/glue/sst2/" && cp "$shared"/glue/cola/in_domain_{train,dev}.tsv "$d/glue/cola/" \
        || exit 2

    # what may go to the corpus: the limit, less the checkout (tracked and untracked files that git does not ignore),
    # the wheels, the rest of the data (compressed) and 2 MiB for the tokenizer and the tar's own overhead
    local checkout rest wheels_b budget used=0 size f
    checkout=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
    wheels_b=$(du -cb "$out/wheels" "$out/wheels-old-pyarrow" 2>/dev/null | tail -1 | cut -f1); wheels_b=${wheels_b:-0}
    rest=$(tar czf - -C "$out/stage" data | wc -c)
    budget=$(( $(awk "BEGIN{print int($limit_mib * 1048576)}") - checkout - wheels_b - rest - 2097152 ))
    ((${#corpus[@]})) || corpus=("$shared"/corpus/enwiki/wiki_*)
    local kept=0
    for f in "${corpus[@]}"; do
        size=$(gzip -c "$f" | wc -c)
        ((used + size > budget)) && break
        cp "$f" "$d/corpus/enwiki/" && used=$((used + size)) && kept=$((kept + 1))
    done
    ((kept)) || die "no corpus file fits: $((budget / 1048576)) MiB left after the checkout, wheels and data"
    echo "corpus: $kept of ${#corpus[@]} files ($(du -sh "$d/corpus" | cut -f1) of text, ~$((used / 1048576)) MiB gzipped)"

    if [[ -n $tok ]]; then
        cp -r "$tok" "$out/tok" || exit 2
    else
        echo "training a $vocab-piece tokenizer on the corpus slice ..."
        $PY -m training.tokenizer --data "$d/corpus/enwiki" --vocab-size "$vocab" --out "$out/tok" --overwrite >/dev/null \
            || die "tokenizer training failed"
    fi
    tar czf "$out/data.tar.gz" -C "$out/stage" data && rm -rf "$out/stage" || exit 2
    {
        echo "commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (with changes)')"
        echo "made $(date -u +%FT%TZ) by benchmarks/gpu_run.sh bundle"
        echo "corpus files: $kept; tokenizer: $([[ -n $tok ]] && echo "copied from $tok" || echo "$vocab pieces")"
        ls -1 "$out/wheels" 2>/dev/null | sed 's/^/wheel /'
    } >"$out/MANIFEST.txt"
    local total
    total=$(du -cb "$out" | tail -1 | cut -f1)
    printf 'bundle %s: %.1f MiB (wheels %.1f, data %.1f); checkout %.1f MiB; together %.1f of %s MiB\n' "$out" \
        "$(awk "BEGIN{print $total/1048576}")" "$(awk "BEGIN{print $wheels_b/1048576}")" \
        "$(awk "BEGIN{print $(wc -c <"$out/data.tar.gz")/1048576}")" "$(awk "BEGIN{print $checkout/1048576}")" \
        "$(awk "BEGIN{print ($total+$checkout)/1048576}")" "$limit_mib"
    ((total + checkout <= $(awk "BEGIN{print int($limit_mib * 1048576)}"))) || die "over the limit: use --limit-mib lower"
}

# ---- run -----------------------------------------------------------------------------------------------------

run() {
    local bundle=gpu_bundle out=${OUT:-runs/gpu_run/out} work=/tmp/gpu_run device=cuda preset=small minutes=1.5
    local objectives=(electric mlm) throughput_objectives=(electric mlm electra) skip=() deadline=570 site=/tmp/site obj
    local t_setup=30 t_throughput=90 t_slack=25 t_tokenize=30 t_health=20 t_blimp=45 t_rerank=40 t_glue=60 t_bring=20
    local t_serve=45 steps=30 warmup=10 blimp_limit="" lists="" glue=0 glue_examples=4000 glue_epochs=2 glue_eval=""
    local serve_seconds=5 pretrain_flags=() num_proc=0 compile=(off cudagraphs) pretrain_compile=auto serve_flags=()
    local piece_mib=15 plan_only=0
    skipped() { [[ " ${skip[*]} " == *" $1 "* ]]; }
    pretrain_limit() { awk "BEGIN{print int($minutes * 60 + $t_slack + ($1 ? $t_tokenize : 0))}"; }  # 1: tokenises
    plan() {  # each stage's time limit, and their sum against the deadline; 1 when the sum is over it
        local line="setup ~${t_setup}" total=$t_setup name first=1
        add() { skipped "${1%%:*}" && return; line+=", $1 $2"; total=$(awk "BEGIN{print $total + $2}"); }
        add throughput "$t_throughput"
        for name in "${objectives[@]}"; do
            add "pretrain:$name-$preset" "$(pretrain_limit $first)"; first=0
        done
        add health "$t_health"; add blimp "$t_blimp"; add rerank "$t_rerank"; add glue "$t_glue"
        add bring-back "$t_bring"; add serve "$t_serve"
        echo "plan (s): $line; in all $total of the ${deadline} s deadline"
        if awk "BEGIN{exit !($total > $deadline)}"; then
            echo "warning: the stages' limits add up to more than --deadline-s $deadline: the last ones get what is" \
                "left, or nothing"
            return 1
        fi
        return 0
    }
    while (($#)); do
        case $1 in
            --bundle) bundle=$2; shift 2 ;;
            --out) out=$2; shift 2 ;;
            --work) work=$2; shift 2 ;;
            --device) device=$2; shift 2 ;;
            --preset) preset=$2; shift 2 ;;
            --minutes) num "$1" "$2"; minutes=$2; shift 2 ;;
            --objectives) objectives=(); shift; while (($#)) && [[ $1 != --* ]]; do objectives+=("$1"); shift; done ;;
            --throughput-objectives) throughput_objectives=(); shift
                while (($#)) && [[ $1 != --* ]]; do throughput_objectives+=("$1"); shift; done ;;
            --skip) shift; while (($#)) && [[ $1 != --* ]]; do skip+=("$1"); shift; done ;;
            --deadline-s) num "$1" "$2"; deadline=$2; shift 2 ;;
            --throughput-s) num "$1" "$2"; t_throughput=$2; shift 2 ;;
            --pretrain-slack-s) num "$1" "$2"; t_slack=$2; shift 2 ;;
            --tokenize-s) num "$1" "$2"; t_tokenize=$2; shift 2 ;;
            --health-s) num "$1" "$2"; t_health=$2; shift 2 ;;
            --blimp-s) num "$1" "$2"; t_blimp=$2; shift 2 ;;
            --rerank-s) num "$1" "$2"; t_rerank=$2; shift 2 ;;
            --glue) glue=1; shift ;;
            --glue-s) num "$1" "$2"; t_glue=$2; shift 2 ;;
            --bring-back-s) num "$1" "$2"; t_bring=$2; shift 2 ;;
            --piece-mib) num "$1" "$2"; piece_mib=$2; shift 2 ;;
            --serve-s) num "$1" "$2"; t_serve=$2; shift 2 ;;
            --steps) steps=$2; shift 2 ;;
            --warmup-steps) warmup=$2; shift 2 ;;
            --blimp-limit) blimp_limit=$2; shift 2 ;;
            --lists) lists=$2; shift 2 ;;
            --glue-examples) glue_examples=$2; shift 2 ;;
            --glue-epochs) glue_epochs=$2; shift 2 ;;
            --glue-eval-examples) glue_eval=$2; shift 2 ;;
            --serve-seconds) serve_seconds=$2; shift 2 ;;
            --num-proc) num_proc=$2; shift 2 ;;
            --throughput-compile) compile=(); shift; while (($#)) && [[ $1 != --* ]]; do compile+=("$1"); shift; done ;;
            --pretrain-compile) [[ $2 =~ ^(auto|off|on|cudagraphs)$ ]] \
                || die "--pretrain-compile expects auto, off, on or cudagraphs, got '$2'"; pretrain_compile=$2; shift 2 ;;
            --plan) plan_only=1; shift ;;
            --no-int8) serve_flags+=(--no-int8); shift ;;
            --site) site=$2; shift 2 ;;
            --pretrain-flags) read -r -a pretrain_flags <<<"$2"; shift 2 ;;
            -h|--help) usage ;;
            *) die "run: unknown option $1 (see --help)" ;;
        esac
    done
    ((${#objectives[@]})) || die "--objectives needs at least one objective"
    ((glue)) || skip+=(glue)
    if ((plan_only)); then plan; return; fi
    mkdir -p "$out" "$work" || die "cannot create $out or $work"
    out=$(cd "$out" && pwd); work=$(cd "$work" && pwd)
    exec > >(tee -a "$out/gpu_run.log") 2>&1
    export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
    echo "gpu_run $(date -u +%FT%TZ): device $device, preset $preset, $minutes min each of ${objectives[*]}; out $out"
    plan

    # setup: the wheels, the data. Without these nothing after can run: a failure here ends the run.
    if compgen -G "$bundle/wheels/*.whl" >/dev/null; then
        $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
            "$bundle"/wheels/*.whl || { echo "STAGE setup FAILED: pip install of $bundle/wheels"; return 1; }
        export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
        if compgen -G "$bundle/wheels-old-pyarrow/*.whl" >/dev/null \
            && ! $PY -c "import pyarrow, sys; sys.exit(int(pyarrow.__version__.split('.')[0]) < 24)" 2>/dev/null; then
            echo "pyarrow older than 24 here: datasets $(ls "$bundle"/wheels-old-pyarrow | sed -n 's/^datasets-\([^-]*\)-.*/\1/p') instead"
            $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
                "$bundle"/wheels-old-pyarrow/*.whl || { echo "STAGE setup FAILED: pip install of wheels-old-pyarrow"; return 1; }
        fi
    fi
    rm -rf "$work/data" && tar xzf "$bundle/data.tar.gz" -C "$work" \
        || { echo "STAGE setup FAILED: cannot unpack $bundle/data.tar.gz"; return 1; }
    export ELECTRIC_SHARED_DATA=$work/data
    local data=$work/data tok=$bundle/tok gpu
    [[ -f $tok/vocab.txt ]] || { echo "STAGE setup FAILED: no tokenizer in $tok"; return 1; }
    tok=$(cd "$tok" && pwd)
    gpu=$($PY -c "import torch; print(torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')")
    echo "setup done in ${SECONDS}s: $gpu; $(ls "$data/corpus/enwiki" | wc -l) corpus files"
    $PY - <<'PY'  # the versions the stages run with; a package that does not import is named here first
import importlib
found = []
for name in ("torch", "transformers", "tokenizers", "onnxruntime", "pyarrow", "datasets", "fastapi", "pydantic",
             "grpc", "google.protobuf", "jiwer"):
    try:
        found.append(f"{name} {getattr(importlib.import_module(name), '__version__', '?')}")
    except Exception as e:  # noqa: BLE001
        found.append(f"{name} FAILED ({type(e).__name__}: {e})")
print("versions: " + ", ".join(found))
PY
    # every stage reads its text through datasets, whose wheel needs a recent pyarrow: without it nothing can run
    $PY -c "import datasets" 2>/dev/null || { echo "STAGE setup FAILED: datasets does not import (see the versions" \
        "above): nothing can read the text"; return 1; }

    local failed=0
    stage() {  # stage NAME LIMIT_S COMMAND...: run it under a time limit; one line when it fails
        local name=$1 limit rc t0=$SECONDS left
        limit=$(awk "BEGIN{print int($2)}"); shift 2
        if skipped "${name%%:*}"; then echo "STAGE $name: skipped ($([[ $name == glue ]] && ((!glue)) \
            && echo "without --glue" || echo "--skip"))"; return 0; fi
        left=$(awk "BEGIN{print int($deadline) - $SECONDS}")
        if ((left < 5)); then echo "STAGE $name FAILED: no time left before the deadline (${deadline}s)"
            failed=$((failed + 1)); return 1; fi
        ((limit > left)) && limit=$left
        ((limit < 1)) && limit=1
        echo "=== $name (limit ${limit}s, at ${SECONDS}s)"
        timeout -k 20 "$limit" "$@"; rc=$?
        if ((rc == 124 || rc == 137)); then echo "STAGE $name FAILED: its time limit (${limit}s) ran out"
        elif ((rc != 0)); then echo "STAGE $name FAILED: exit status $rc"
        else echo "STAGE $name: done in $((SECONDS - t0))s"; return 0; fi
        failed=$((failed + 1)); return 1
    }

    # 1. throughput of each objective (the first corpus file is enough for 40 steps a row): every objective compile
    # off first, then compiled, so a stage cut short keeps the cheap rows
    local first
    first=$(ls "$data"/corpus/enwiki/* | head -1)
    stage throughput "$t_throughput" $PY benchmarks/bench_gpu_throughput.py --data "$first" --tokenizer "$tok" \
        --objectives "${throughput_objectives[@]}" \
        --preset "$preset" --steps "$steps" --warmup-steps "$warmup" --device "$device" --num-proc "$num_proc" \
        --compile "${compile[@]}" --cache-dir "$work/cache" --json "$out/gpu_throughput.json" --profile "$work/profile"
    if compgen -G "$work/profile/*.txt" >/dev/null; then
        for f in "$work"/profile/*.txt; do echo "==== $(basename "$f")"; cat "$f"; done >"$out/gpu_profile.txt"
    fi

    # 2. pretraining, one objective after the other, each with the whole GPU for --minutes, its step compiled where
    # the throughput rows say compiling pays within those minutes (--pretrain-compile auto)
    local runs=() name cmd limit compile_flags
    mkdir -p "$work/runs"
    for obj in "${objectives[@]}"; do
        name=$obj-$preset
        read -r -a compile_flags < <($PY benchmarks/gpu_compile_choice.py --json "$out/gpu_throughput.json" \
            --objective "$obj" --minutes "$minutes" --mode "$pretrain_compile")
        cmd=($PY -m training.pretrain --objective "$obj" --preset "$preset" --data "$data/corpus/enwiki"
             --tokenizer "$tok" --time-budget "$minutes" --device "$device" --num-proc "$num_proc"
             --cache-dir "$work/cache" --overwrite --out "$work/runs/$name" "${compile_flags[@]}"
             "${pretrain_flags[@]}")
        printf '%q ' python "${cmd[@]:1}" | sed 's/ $//' >"$work/runs/$name.cmd"
        limit=$(pretrain_limit $((${#runs[@]} == 0)))
        stage "pretrain:$name" "$limit" "${cmd[@]}"
        [[ -f $work/runs/$name/config.json ]] && runs+=("$name=$work/runs/$name")
    done
    ((${#runs[@]})) || { echo "no pretraining run left a model: nothing to evaluate"; }

    # 3. evaluation into gpu_pretrain.json, a figure at a time
    local report=(benchmarks/gpu_pretrain_report.py --report "$out/gpu_pretrain.json" --work "$work/report"
                  --device "$device" --run "${runs[@]}")
    if ((${#runs[@]})); then
        stage health "$t_health" $PY "${report[@]:0:1}" health "${report[@]:1}" --gpu "$gpu" --minutes "$minutes"
        stage blimp "$t_blimp" $PY "${report[@]:0:1}" blimp "${report[@]:1}" --data "$data/blimp" \
            ${blimp_limit:+--limit "$blimp_limit"}
        stage rerank "$t_rerank" $PY "${report[@]:0:1}" rerank "${report[@]:1}" --data "$data/nbest" \
            ${lists:+--lists "$lists"}
        stage glue "$t_glue" $PY "${report[@]:0:1}" glue "${report[@]:1}" --data "$data/glue" \
            --glue-examples "$glue_examples" --glue-epochs "$glue_epochs" ${glue_eval:+--glue-eval-examples "$glue_eval"}
        # 4. the best discriminator, before serving: a lost minute there must not lose the model
        stage bring-back "$t_bring" $PY "${report[@]:0:1}" bring-back "${report[@]:1}" --out "$out/model" \
            --piece-mib "$piece_mib" --best-file "$work/best"
    fi

    # 5. serving the best discriminator (or the first run's) on the GPU, beside the CPU int8 server
    local best=""
    [[ -f $work/best ]] && best=$(cat "$work/best")
    [[ -z $best && ${#runs[@]} -gt 0 ]] && best=${runs[0]#*=}
    if [[ -n $best && -d $best/discriminator ]]; then
        stage serve "$t_serve" $PY benchmarks/bench_gpu_serve.py --model "$best/discriminator" \
            --json "$out/gpu_serve.json" --seconds "$serve_seconds" --work "$work/serve" --gpu "$gpu" "${serve_flags[@]}"
    else
        echo "STAGE serve FAILED: no discriminator to serve"; failed=$((failed + 1))
    fi
    echo "gpu_run done in ${SECONDS}s: $failed stage(s) failed; figures in $out"
    ls -l "$out" "$out/model" 2>/dev/null
    return 0
}

case ${1:-} in
    bundle) shift; bundle "$@" ;;
    run) shift; run "$@" ;;
    -h|--help|"") usage ;;
    *) die "unknown command $1: bundle or run" ;;
esac
