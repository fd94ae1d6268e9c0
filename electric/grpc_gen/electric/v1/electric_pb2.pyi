from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ScoreRequest(_message.Message):
    __slots__ = ("texts", "per_token", "truncate", "ngram")
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    PER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    NGRAM_FIELD_NUMBER: _ClassVar[int]
    texts: _containers.RepeatedScalarFieldContainer[str]
    per_token: bool
    truncate: bool
    ngram: bool
    def __init__(self, texts: _Optional[_Iterable[str]] = ..., per_token: _Optional[bool] = ..., truncate: _Optional[bool] = ..., ngram: _Optional[bool] = ...) -> None: ...

class TokenScore(_message.Message):
    __slots__ = ("token", "start", "end", "score")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    token: str
    start: int
    end: int
    score: float
    def __init__(self, token: _Optional[str] = ..., start: _Optional[int] = ..., end: _Optional[int] = ..., score: _Optional[float] = ...) -> None: ...

class TextScore(_message.Message):
    __slots__ = ("text", "score", "mean", "num_tokens", "method", "truncated", "tokens", "ngram")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    NGRAM_FIELD_NUMBER: _ClassVar[int]
    text: str
    score: float
    mean: float
    num_tokens: int
    method: str
    truncated: bool
    tokens: _containers.RepeatedCompositeFieldContainer[TokenScore]
    ngram: float
    def __init__(self, text: _Optional[str] = ..., score: _Optional[float] = ..., mean: _Optional[float] = ..., num_tokens: _Optional[int] = ..., method: _Optional[str] = ..., truncated: _Optional[bool] = ..., tokens: _Optional[_Iterable[_Union[TokenScore, _Mapping]]] = ..., ngram: _Optional[float] = ...) -> None: ...

class ScoreResponse(_message.Message):
    __slots__ = ("model", "results")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    model: str
    results: _containers.RepeatedCompositeFieldContainer[TextScore]
    def __init__(self, model: _Optional[str] = ..., results: _Optional[_Iterable[_Union[TextScore, _Mapping]]] = ...) -> None: ...

class NBestList(_message.Message):
    __slots__ = ("hypotheses", "scores", "id")
    HYPOTHESES_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    hypotheses: _containers.RepeatedScalarFieldContainer[str]
    scores: _containers.RepeatedScalarFieldContainer[float]
    id: str
    def __init__(self, hypotheses: _Optional[_Iterable[str]] = ..., scores: _Optional[_Iterable[float]] = ..., id: _Optional[str] = ...) -> None: ...

class RerankWeights(_message.Message):
    __slots__ = ("lm", "length", "beta", "prior", "piece", "lm_score", "ngram")
    LM_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    BETA_FIELD_NUMBER: _ClassVar[int]
    PRIOR_FIELD_NUMBER: _ClassVar[int]
    PIECE_FIELD_NUMBER: _ClassVar[int]
    LM_SCORE_FIELD_NUMBER: _ClassVar[int]
    NGRAM_FIELD_NUMBER: _ClassVar[int]
    lm: float
    length: float
    beta: float
    prior: str
    piece: float
    lm_score: str
    ngram: float
    def __init__(self, lm: _Optional[float] = ..., length: _Optional[float] = ..., beta: _Optional[float] = ..., prior: _Optional[str] = ..., piece: _Optional[float] = ..., lm_score: _Optional[str] = ..., ngram: _Optional[float] = ...) -> None: ...

class RerankRequest(_message.Message):
    __slots__ = ("lists", "weights", "truncate")
    LISTS_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    lists: _containers.RepeatedCompositeFieldContainer[NBestList]
    weights: RerankWeights
    truncate: bool
    def __init__(self, lists: _Optional[_Iterable[_Union[NBestList, _Mapping]]] = ..., weights: _Optional[_Union[RerankWeights, _Mapping]] = ..., truncate: _Optional[bool] = ...) -> None: ...

class RankedHypothesis(_message.Message):
    __slots__ = ("text", "rank", "total", "prior", "lm", "words", "pieces", "ngram")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    PRIOR_FIELD_NUMBER: _ClassVar[int]
    LM_FIELD_NUMBER: _ClassVar[int]
    WORDS_FIELD_NUMBER: _ClassVar[int]
    PIECES_FIELD_NUMBER: _ClassVar[int]
    NGRAM_FIELD_NUMBER: _ClassVar[int]
    text: str
    rank: int
    total: float
    prior: float
    lm: float
    words: int
    pieces: int
    ngram: float
    def __init__(self, text: _Optional[str] = ..., rank: _Optional[int] = ..., total: _Optional[float] = ..., prior: _Optional[float] = ..., lm: _Optional[float] = ..., words: _Optional[int] = ..., pieces: _Optional[int] = ..., ngram: _Optional[float] = ...) -> None: ...

class RerankResult(_message.Message):
    __slots__ = ("utt_id", "best", "order", "hyps", "tied")
    UTT_ID_FIELD_NUMBER: _ClassVar[int]
    BEST_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    HYPS_FIELD_NUMBER: _ClassVar[int]
    TIED_FIELD_NUMBER: _ClassVar[int]
    utt_id: str
    best: str
    order: _containers.RepeatedScalarFieldContainer[int]
    hyps: _containers.RepeatedCompositeFieldContainer[RankedHypothesis]
    tied: bool
    def __init__(self, utt_id: _Optional[str] = ..., best: _Optional[str] = ..., order: _Optional[_Iterable[int]] = ..., hyps: _Optional[_Iterable[_Union[RankedHypothesis, _Mapping]]] = ..., tied: _Optional[bool] = ...) -> None: ...

class RerankResponse(_message.Message):
    __slots__ = ("model", "results", "weights")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    model: str
    results: _containers.RepeatedCompositeFieldContainer[RerankResult]
    weights: RerankWeights
    def __init__(self, model: _Optional[str] = ..., results: _Optional[_Iterable[_Union[RerankResult, _Mapping]]] = ..., weights: _Optional[_Union[RerankWeights, _Mapping]] = ...) -> None: ...

class DetectRequest(_message.Message):
    __slots__ = ("texts", "truncate", "totals_only")
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    TOTALS_ONLY_FIELD_NUMBER: _ClassVar[int]
    texts: _containers.RepeatedScalarFieldContainer[str]
    truncate: bool
    totals_only: bool
    def __init__(self, texts: _Optional[_Iterable[str]] = ..., truncate: _Optional[bool] = ..., totals_only: _Optional[bool] = ...) -> None: ...

class TokenDetection(_message.Message):
    __slots__ = ("token", "start", "end", "prob", "logit")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    PROB_FIELD_NUMBER: _ClassVar[int]
    LOGIT_FIELD_NUMBER: _ClassVar[int]
    token: str
    start: int
    end: int
    prob: float
    logit: float
    def __init__(self, token: _Optional[str] = ..., start: _Optional[int] = ..., end: _Optional[int] = ..., prob: _Optional[float] = ..., logit: _Optional[float] = ...) -> None: ...

class WordDetection(_message.Message):
    __slots__ = ("word", "start", "end", "max_prob", "mean_prob", "num_pieces")
    WORD_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    MAX_PROB_FIELD_NUMBER: _ClassVar[int]
    MEAN_PROB_FIELD_NUMBER: _ClassVar[int]
    NUM_PIECES_FIELD_NUMBER: _ClassVar[int]
    word: str
    start: int
    end: int
    max_prob: float
    mean_prob: float
    num_pieces: int
    def __init__(self, word: _Optional[str] = ..., start: _Optional[int] = ..., end: _Optional[int] = ..., max_prob: _Optional[float] = ..., mean_prob: _Optional[float] = ..., num_pieces: _Optional[int] = ...) -> None: ...

class TextDetection(_message.Message):
    __slots__ = ("text", "score", "mean", "num_tokens", "tokens", "words", "truncated")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    WORDS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    text: str
    score: float
    mean: float
    num_tokens: int
    tokens: _containers.RepeatedCompositeFieldContainer[TokenDetection]
    words: _containers.RepeatedCompositeFieldContainer[WordDetection]
    truncated: bool
    def __init__(self, text: _Optional[str] = ..., score: _Optional[float] = ..., mean: _Optional[float] = ..., num_tokens: _Optional[int] = ..., tokens: _Optional[_Iterable[_Union[TokenDetection, _Mapping]]] = ..., words: _Optional[_Iterable[_Union[WordDetection, _Mapping]]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class DetectResponse(_message.Message):
    __slots__ = ("model", "results")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    model: str
    results: _containers.RepeatedCompositeFieldContainer[TextDetection]
    def __init__(self, model: _Optional[str] = ..., results: _Optional[_Iterable[_Union[TextDetection, _Mapping]]] = ...) -> None: ...

class TextPair(_message.Message):
    __slots__ = ("text", "text_pair")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TEXT_PAIR_FIELD_NUMBER: _ClassVar[int]
    text: str
    text_pair: str
    def __init__(self, text: _Optional[str] = ..., text_pair: _Optional[str] = ...) -> None: ...

class ClassifyRequest(_message.Message):
    __slots__ = ("model", "texts", "pairs", "truncate")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    model: str
    texts: _containers.RepeatedScalarFieldContainer[str]
    pairs: _containers.RepeatedCompositeFieldContainer[TextPair]
    truncate: bool
    def __init__(self, model: _Optional[str] = ..., texts: _Optional[_Iterable[str]] = ..., pairs: _Optional[_Iterable[_Union[TextPair, _Mapping]]] = ..., truncate: _Optional[bool] = ...) -> None: ...

class LabelProbability(_message.Message):
    __slots__ = ("label", "probability")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    label: str
    probability: float
    def __init__(self, label: _Optional[str] = ..., probability: _Optional[float] = ...) -> None: ...

class TokenLabel(_message.Message):
    __slots__ = ("token", "start", "end", "label", "probability")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    token: str
    start: int
    end: int
    label: str
    probability: float
    def __init__(self, token: _Optional[str] = ..., start: _Optional[int] = ..., end: _Optional[int] = ..., label: _Optional[str] = ..., probability: _Optional[float] = ...) -> None: ...

class TextClassification(_message.Message):
    __slots__ = ("label", "probabilities", "value", "tokens", "words", "truncated")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    PROBABILITIES_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    WORDS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    label: str
    probabilities: _containers.RepeatedCompositeFieldContainer[LabelProbability]
    value: float
    tokens: _containers.RepeatedCompositeFieldContainer[TokenLabel]
    words: _containers.RepeatedCompositeFieldContainer[TokenLabel]
    truncated: bool
    def __init__(self, label: _Optional[str] = ..., probabilities: _Optional[_Iterable[_Union[LabelProbability, _Mapping]]] = ..., value: _Optional[float] = ..., tokens: _Optional[_Iterable[_Union[TokenLabel, _Mapping]]] = ..., words: _Optional[_Iterable[_Union[TokenLabel, _Mapping]]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class ClassifyResponse(_message.Message):
    __slots__ = ("model", "results")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    model: str
    results: _containers.RepeatedCompositeFieldContainer[TextClassification]
    def __init__(self, model: _Optional[str] = ..., results: _Optional[_Iterable[_Union[TextClassification, _Mapping]]] = ...) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "kind", "path", "backend", "max_length", "providers", "labels", "regression", "method", "trained_length", "max_positions", "training_warnings")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    MAX_LENGTH_FIELD_NUMBER: _ClassVar[int]
    PROVIDERS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    REGRESSION_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    TRAINED_LENGTH_FIELD_NUMBER: _ClassVar[int]
    MAX_POSITIONS_FIELD_NUMBER: _ClassVar[int]
    TRAINING_WARNINGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    path: str
    backend: str
    max_length: int
    providers: _containers.RepeatedScalarFieldContainer[str]
    labels: _containers.RepeatedScalarFieldContainer[str]
    regression: bool
    method: str
    trained_length: int
    max_positions: int
    training_warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., path: _Optional[str] = ..., backend: _Optional[str] = ..., max_length: _Optional[int] = ..., providers: _Optional[_Iterable[str]] = ..., labels: _Optional[_Iterable[str]] = ..., regression: _Optional[bool] = ..., method: _Optional[str] = ..., trained_length: _Optional[int] = ..., max_positions: _Optional[int] = ..., training_warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class Limits(_message.Message):
    __slots__ = ("max_inputs_per_request", "max_tokens_per_input", "max_batch_tokens", "max_batch_size", "max_concurrent_requests", "max_body_bytes", "max_wait_ms", "request_timeout_s", "max_input_chars")
    MAX_INPUTS_PER_REQUEST_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_PER_INPUT_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    MAX_BODY_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    MAX_INPUT_CHARS_FIELD_NUMBER: _ClassVar[int]
    max_inputs_per_request: int
    max_tokens_per_input: int
    max_batch_tokens: int
    max_batch_size: int
    max_concurrent_requests: int
    max_body_bytes: int
    max_wait_ms: float
    request_timeout_s: float
    max_input_chars: int
    def __init__(self, max_inputs_per_request: _Optional[int] = ..., max_tokens_per_input: _Optional[int] = ..., max_batch_tokens: _Optional[int] = ..., max_batch_size: _Optional[int] = ..., max_concurrent_requests: _Optional[int] = ..., max_body_bytes: _Optional[int] = ..., max_wait_ms: _Optional[float] = ..., request_timeout_s: _Optional[float] = ..., max_input_chars: _Optional[int] = ...) -> None: ...

class InfoResponse(_message.Message):
    __slots__ = ("version", "ready", "models", "limits", "rerank_defaults", "rerank_parts", "ngram")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    RERANK_DEFAULTS_FIELD_NUMBER: _ClassVar[int]
    RERANK_PARTS_FIELD_NUMBER: _ClassVar[int]
    NGRAM_FIELD_NUMBER: _ClassVar[int]
    version: str
    ready: bool
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    limits: Limits
    rerank_defaults: RerankWeights
    rerank_parts: _containers.RepeatedScalarFieldContainer[str]
    ngram: str
    def __init__(self, version: _Optional[str] = ..., ready: _Optional[bool] = ..., models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., rerank_defaults: _Optional[_Union[RerankWeights, _Mapping]] = ..., rerank_parts: _Optional[_Iterable[str]] = ..., ngram: _Optional[str] = ...) -> None: ...
