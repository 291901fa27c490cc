"""Transaction errors; the broker maps each to a gRPC status and error code."""


class TransactionError(Exception):
    """Base class of transaction errors."""


class TransactionEndedError(TransactionError):
    """The transaction has committed, aborted or timed out: nothing more may join it."""


class TransactionNotFoundError(TransactionError):
    """No transaction with that id is known."""


class TooManyTransactionsError(TransactionError):
    """Opening one more transaction would pass the coordinator's limit (all, or per client)."""


class TransactionBufferNotReadyError(TransactionError):
    """The topic's transaction buffer is recovering or closed."""
