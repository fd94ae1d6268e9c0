"""HTTP + gRPC serving of Electric models: transports (http.py's routes, http_docs.py's API pages and http_ui.py's
page for people, ui/, behind http_middleware.py and http_protocol.py, grpc_service.py, sharing transport.py) ->
engine.py (admission, validation, routes) -> batcher.py (model slots, queues, tokenise and batch loops, the forward
pass; encoding is the library's electric.inference.encoding) -> runtime, with pipelines.py (per-input
post-processing) and errors.py (typed errors, no status codes). The core (engine, batcher, errors, pipelines)
imports no transport library; each transport maps the errors to its codes.

Start it with `electric serve --model DIR` or `python -m server`; see docs/server.md.
"""
