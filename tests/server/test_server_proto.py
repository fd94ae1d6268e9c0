"""The generated gRPC stubs (electric/grpc_gen) must match proto/electric/v1/*.proto."""

from __future__ import annotations

import pytest

pytest.importorskip("grpc_tools", reason="grpcio-tools (dev extra) generates the stubs")


def test_generated_stubs_are_up_to_date():
    from server.gen_proto import stale_files

    stale = stale_files()
    assert stale == [], f"regenerate with `python -m server.gen_proto`: {stale} differ from the .proto"


def test_a_changed_proto_is_detected(tmp_path, monkeypatch):
    import shutil

    from server import gen_proto

    proto_root = tmp_path / "proto"
    shutil.copytree(gen_proto.PROTO_ROOT, proto_root)
    f = proto_root / "electric" / "v1" / "electric.proto"
    f.write_text(f.read_text().replace("bool per_token = 2;", "bool per_token = 2;\n  bool brand_new = 9;"))
    monkeypatch.setattr(gen_proto, "PROTO_ROOT", proto_root)
    assert "electric/v1/electric_pb2.py" in gen_proto.stale_files()


def test_services_parallel_the_http_routes():
    from electric.grpc_gen.electric.v1 import electric_pb2 as pb

    methods = {f"{s.name}/{m.name}" for s in pb.DESCRIPTOR.services_by_name.values() for m in s.methods}
    assert methods == {"Scoring/Score", "Scoring/Rerank", "Detection/Detect", "Classification/Classify",
                       "Info/GetInfo"}
    assert pb.DESCRIPTOR.package == "electric.v1"
