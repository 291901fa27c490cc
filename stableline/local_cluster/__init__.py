"""A cluster on one machine for `stableline cluster up`: an etcd (etcd.py) and brokers
started as child processes (children.py), their ports recorded so a restart brings
back the same cluster (layout.py), watched and stopped in order (supervisor.py)."""
