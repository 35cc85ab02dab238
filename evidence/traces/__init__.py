"""Trace sources: OTLP files, Grafana Tempo and Jaeger, answering ``query_traces`` alike."""
