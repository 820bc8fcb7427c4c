# The structured exceptions of durable_rpc._core, defined in Python because the stable
# ABI (abi3) cannot subclass a built-in exception from a #[pyclass]. The extension runs
# this source when it is imported and raises these classes; the stub is _core.pyi.
# __slots__ keeps each a disjoint base (as the stub says); args holds the constructor's
# arguments, so an instance pickles and rebuilds.


class PayloadError(ValueError):
    __slots__ = ("_message", "_reason")
    __module__ = "durable_rpc._core"

    def __new__(cls, reason, message):
        self = super().__new__(cls, reason, message)
        self._reason = reason
        self._message = message
        return self

    def __str__(self):
        return f"{self._reason}: {self._message}"

    @property
    def reason(self):
        """The stable reason code, e.g. ``invalid_payload_framing``."""
        return self._reason

    @property
    def message(self):
        """The human-readable explanation."""
        return self._message


class NondeterminismError(Exception):
    __slots__ = ("_actual", "_expected", "_seq")
    __module__ = "durable_rpc._core"

    def __new__(cls, seq, expected, actual):
        self = super().__new__(cls, seq, expected, actual)
        self._seq = seq
        self._expected = expected
        self._actual = actual
        return self

    def __str__(self):
        return f"nondeterminism at seq {self._seq}: expected {self._expected}, got {self._actual}"

    @property
    def seq(self):
        """The workflow seq where the code diverged from history."""
        return self._seq

    @property
    def expected(self):
        """The recorded command, or ``nothing``."""
        return self._expected

    @property
    def actual(self):
        """The produced command, or ``nothing``."""
        return self._actual


class MalformedHistoryError(ValueError):
    __slots__ = ("_message",)
    __module__ = "durable_rpc._core"

    def __new__(cls, message):
        self = super().__new__(cls, message)
        self._message = message
        return self

    def __str__(self):
        return f"malformed history: {self._message}"

    @property
    def message(self):
        """What is wrong with the history."""
        return self._message
