"""How the gRPC face reports errors: the status the error table gives the error's
stable code, and the code itself.

The code travels in the trailing metadata key `stableline-error` (and in the
error fields of stream responses) so clients raise a typed exception without
parsing messages meant for people. Which code an exception has is the broker's
(stableline/broker/errors.py); which status a code has is the table's
(stableline/error_codes.py).
"""

from __future__ import annotations

import resource

import grpc

from managed_ledger import ReplicaGapError
from stableline.broker.errors import INTERNAL, Refusal, code_of, internal_error_message
from stableline.error_codes import ERROR_METADATA_KEY, LEADER_METADATA_KEY, row_of

__all__ = [
    "ERROR_METADATA_KEY",
    "REPLICA_HELD_METADATA_KEY",
    "RpcRefusal",
    "abort",
    "classify",
    "grpc_status",
    "invalid",
]

# A ReplicaGap refusal's count of entries the replica holds (decimal), beside its code.
REPLICA_HELD_METADATA_KEY = "stableline-replica-held"


def grpc_status(code: str) -> grpc.StatusCode:
    return row_of(code).grpc_status


class RpcRefusal(Refusal):
    """A refusal as this face sends it: the code, and the table's status for it."""

    def __init__(self, code: str, message: str):
        super().__init__(code, message)
        self.status = grpc_status(code)


def classify(error: BaseException) -> RpcRefusal:
    if isinstance(error, RpcRefusal):
        return error
    code = code_of(error)
    if isinstance(error, Refusal):  # made with its message (a guard's, a peer's)
        return RpcRefusal(code, str(error))
    if code == INTERNAL:
        return RpcRefusal(code, internal_error_message(error))
    if code == "TooManyOpenFiles" and isinstance(error, OSError):
        # Out of descriptors outside the ledger files (a snapshot, an index file).
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        return RpcRefusal(
            code,
            f"too many open files ({error}); the broker's open-files limit is {soft} "
            f"(hard limit {hard}): raise it (ulimit -n) or lower max_open_ledger_files",
        )
    return RpcRefusal(code, str(error))


def invalid(message: str, code: str = "InvalidArgument") -> RpcRefusal:
    return RpcRefusal(code, message)


async def abort(context: grpc.aio.ServicerContext, error: BaseException) -> None:
    """End the RPC with the error's status; raises, as grpc.aio's abort does."""
    refusal = classify(error)
    metadata: tuple[tuple[str, str], ...] = ((ERROR_METADATA_KEY, refusal.code),)
    if isinstance(error, ReplicaGapError):
        # What the writer needs to act on: where to resend from.
        metadata += ((REPLICA_HELD_METADATA_KEY, str(error.held)),)
    leader_address = getattr(error, "leader_address", "")
    if leader_address:  # a transaction's coordinator shard is led there
        metadata += ((LEADER_METADATA_KEY, leader_address),)
    await context.abort(refusal.status, str(refusal), trailing_metadata=metadata)
