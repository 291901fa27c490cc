"""Why a broker refuses a transaction call for a coordinator shard it does not lead."""

from __future__ import annotations

from stableline.broker.errors import BrokerError


class CoordinatorNotLeaderError(BrokerError):
    """Another broker leads the transaction's shard: the client asks it instead."""

    code = "NotOwner"

    def __init__(self, shard: int, leader_address: str, leader_http_url: str = ""):
        self.leader_address = leader_address
        self.leader_http_url = leader_http_url
        super().__init__(
            f"transaction coordinator shard {shard} is led by broker {leader_address}, "
            f"not this one: end or read the transaction there"
        )


class CoordinatorUnavailableError(BrokerError):
    """The shard's leader is down; its transactions wait on its disk. Retry later."""

    code = "CoordinatorUnavailable"

    def __init__(self, shard: int, leader: str):
        super().__init__(
            f"transaction coordinator shard {shard} is unavailable: its leader, broker "
            f"{leader}, is down; its transactions come back with it"
        )


class CoordinatorLeavingError(CoordinatorUnavailableError):
    """This broker is stopping and hands its coordinator shards over: another broker
    answers (the client asks the next one it knows)."""

    code = "BrokerUnavailable"

    def __init__(self, shard: int):
        BrokerError.__init__(
            self,
            f"this broker is shutting down and takes no transaction of coordinator shard "
            f"{shard}; ask another broker of the cluster",
        )


class ShardLogConflictError(BrokerError):
    """This data dir holds a coordinator shard's log that another broker leads."""

    code = "Internal"
