"""What the broker tells about itself: Prometheus metrics and why readers wait."""
