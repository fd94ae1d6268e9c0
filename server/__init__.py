"""HTTP + gRPC serving of Electric models: transports (http.py, grpc_service.py, sharing transport.py) ->
engine.py (admission, queue, batches; errors.py: its typed errors, no status codes) -> runtime. The core
(engine, errors, pipelines) imports no transport library; each transport maps the errors to its codes.

Start it with `electric serve --model DIR` or `python -m server`; see docs/server.md.
"""
