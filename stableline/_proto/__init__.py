"""Generated protobuf and gRPC modules; do not edit (scripts/gen_proto.py)."""
