"""`stableline perf`: load generators and meters for a running broker, like pulsar-perf.

A `Workload` says what to run (topics, producers, subscriptions and consumers,
rate, message size, batching, transactions, isolation, how long); `run` runs it
in worker processes and returns the summary (rates, HDR-style latency
percentiles, transaction figures, CPU per message, and consistency checks).
"""

from stableline.perf.histogram import LatencyHistogram
from stableline.perf.runner import PerfError, run
from stableline.perf.workload import Workload

__all__ = ["LatencyHistogram", "PerfError", "Workload", "run"]
