"""The HTTP face: the admin API on Pulsar's paths, one module per resource, /metrics and the dashboard."""
