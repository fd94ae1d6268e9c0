# electric serve in a container: ONNX Runtime on CUDA (the default base) or on the CPU (a Debian base).
#
# GPU, the default base (from a registry that serves nvidia/cuda; run with the NVIDIA container toolkit):
#   electric export --model runs/electric-tiny/discriminator --out models/scorer --quantize int8 --fp16
#   docker build -t electric-serve .
#   docker run --gpus all -p 8000:8000 -p 50051:50051 -v $PWD/models/scorer:/models:ro electric-serve
#   docker run ... -e ELECTRIC_CLASSIFIERS=sst2=/classifiers/sst2 -v $PWD/models/sst2:/classifiers/sst2:ro ...
#
# CPU, with no registry at all: scripts/build_image.sh makes a Debian base with debootstrap, imports it into podman
# and builds this file on it (what was built and run here: docs/scale.md, "The container image"):
#   podman build --format docker --build-arg BASE_IMAGE=localhost/electric-base:bookworm \
#       --build-arg ORT_PACKAGE=onnxruntime --secret id=pip_ca,src=/etc/ssl/certs/ca-certificates.crt -t IMAGE .
#   podman run -p 8000:8000 -p 50051:50051 -v $PWD/models/scorer:/models:ro IMAGE
#
# Build arguments: BASE_IMAGE, any Ubuntu or Debian image whose apt has python3 >= 3.10 (python3.12 on the CUDA base,
# 3.11 on Debian bookworm); ORT_PACKAGE, the ONNX Runtime requirement (onnxruntime-gpu on CUDA, onnxruntime on the
# CPU). The optional build secret `pip_ca` is a CA bundle for pip, for a network whose TLS goes through a proxy that
# re-signs it; it is mounted for that one step and never stored in a layer. Build with `--format docker` under
# podman/buildah: the OCI image format has no HEALTHCHECK.
# Every setting is an ELECTRIC_* environment variable (docs/server.md); the model directory is mounted
# at /models. PyPI's onnxruntime-gpu 1.20 to 1.26 is built for CUDA 12 and cuDNN 9, which the default base provides;
# from 1.27 on it links CUDA 13 (libcublasLt.so.13), whose provider would fail to load here and leave the CPU.
# A CUDA 13 base takes ORT_PACKAGE=onnxruntime-gpu>=1.27.
ARG BASE_IMAGE=nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04
FROM ${BASE_IMAGE}
ARG ORT_PACKAGE="onnxruntime-gpu>=1.20,<1.27"

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

# python3 and curl follow the base image's release (apt); the Python packages are pinned by pyproject.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv curl \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv "$VIRTUAL_ENV"

WORKDIR /app
# Only what serving needs: the base install (ONNX Runtime, tokenizers, the HTTP and gRPC server). No torch and
# no transformers: an `electric export` directory runs on ONNX Runtime and its tokenizer.json on `tokenizers`.
# (A transformers checkpoint, --backend torch, needs the torch extra, `pip install ".[torch]"` here - the distribution
# is electric-scoring, not PyPI's unrelated `electric`; the server says so.)
COPY pyproject.toml README.md ./
COPY electric ./electric
COPY server ./server
COPY proto ./proto
# Then ORT_PACKAGE: another package (onnxruntime-gpu) replaces the CPU onnxruntime, as both provide the `onnxruntime`
# module; onnxruntime itself is already there (or, with a version, installed at that version).
# DL3013: the versions are pyproject's ranges and ORT_PACKAGE, not pins repeated here.
# hadolint ignore=DL3013
RUN --mount=type=secret,id=pip_ca \
    if [ -f /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
    && pip install . \
    && if [ "${ORT_PACKAGE%%[<>=!~ ]*}" != onnxruntime ]; then pip uninstall -y onnxruntime; fi \
    && pip install "$ORT_PACKAGE"

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
