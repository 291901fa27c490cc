"""Transaction errors; the broker maps each to a gRPC status and error code."""


class TransactionError(Exception):
    """Base class of transaction errors."""


class TransactionEndedError(TransactionError):
    """The transaction has committed, aborted or timed out: nothing more may join it."""


class TransactionNotFoundError(TransactionError):
    """No transaction with that id is known."""


class TooManyTransactionsError(TransactionError):
    """Opening one more transaction would pass the coordinator's limit (all, or per client)."""


class TransactionNotOwnedError(TransactionError):
    """The transaction belongs to another owner: only its owner may end it, write or
    ack in it, or read its state."""


class TransactionTooLargeError(TransactionError):
    """One more ack would pass the limit on acknowledged messages per transaction."""


class TransactionBufferNotReadyError(TransactionError):
    """The topic's transaction buffer is recovering or closed."""


class CoordinatorFencedError(TransactionError):
    """Another broker leads this coordinator's shard now (its log was taken): this one
    decides, joins and ends nothing more."""
