"""Generated protobuf and gRPC code for durable_rpc.v1. Do not edit."""
