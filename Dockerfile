# electric serve on GPU: ONNX Runtime with the CUDA execution provider (falls back to CPU without a GPU).
#
#   electric export --model runs/electric-tiny/discriminator --out models/scorer --quantize int8 --fp16
#   docker build -t electric-serve .
#   docker run --gpus all -p 8000:8000 -p 50051:50051 -v $PWD/models/scorer:/models:ro electric-serve
#   docker run ... -e ELECTRIC_CLASSIFIERS=sst2=/classifiers/sst2 -v $PWD/models/sst2:/classifiers/sst2:ro ...
#
# Every setting is an ELECTRIC_* environment variable (docs/server.md); the model directory is mounted
# at /models. onnxruntime-gpu 1.20+ needs CUDA 12 and cuDNN 9, which this base image provides.
FROM nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04


# DL3064: TOKENIZERS_PARALLELISM holds no secret
# hadolint ignore=DL3064
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    HF_HUB_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false

# Ubuntu's python3 and curl follow the base image's release; the Python packages are pinned by pyproject.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv curl \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv "$VIRTUAL_ENV"

WORKDIR /app
# Only what serving needs: the base install (ONNX Runtime, tokenizers, the HTTP and gRPC server). No torch and
# no transformers: an `electric export` directory runs on ONNX Runtime and its tokenizer.json on `tokenizers`.
# (A transformers checkpoint, --backend torch, needs `pip install "electric[torch]"`; the server says so.)
COPY pyproject.toml README.md ./
COPY electric ./electric
COPY server ./server
COPY proto ./proto
# onnxruntime-gpu instead of the CPU onnxruntime: both provide the `onnxruntime` module.
# hadolint ignore=DL3013
RUN pip install . \
    && pip uninstall -y onnxruntime \
    && pip install "onnxruntime-gpu>=1.20"

RUN useradd --create-home --uid 10001 electric
USER 10001

ENV ELECTRIC_MODEL=/models \
    ELECTRIC_HOST=0.0.0.0 \
    ELECTRIC_HTTP_PORT=8000 \
    ELECTRIC_GRPC_PORT=50051
EXPOSE 8000 50051
# shell form, so that ELECTRIC_HTTP_PORT set at `docker run` is used
# hadolint ignore=DL3025
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 \
    CMD curl -fsS "http://127.0.0.1:${ELECTRIC_HTTP_PORT}/health" || exit 1
STOPSIGNAL SIGTERM
ENTRYPOINT ["electric", "serve"]
