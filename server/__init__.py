"""HTTP + gRPC serving of Electric models: transports (http.py, grpc_service.py) -> engine.py -> runtime.

Start it with `electric serve --model DIR` or `python -m server`; see docs/server.md.
"""
