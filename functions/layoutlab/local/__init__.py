"""The embedded default: moto on 127.0.0.1, S3 latency proxy, local task dispatch."""
