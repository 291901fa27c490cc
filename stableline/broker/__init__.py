"""The broker: topic registry, gRPC and HTTP faces, configuration."""
