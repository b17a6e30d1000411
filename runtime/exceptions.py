"""Errors raised by the runtime and by operator declarations."""

from __future__ import annotations

from sana.exceptions import SanaError


class RuntimeFailure(SanaError):
    """The runtime could not carry out a deployment or a removal."""

    code = "RUNTIME_FAILURE"


class OperatorRegistryError(SanaError):
    """An operator type was registered twice (a programming error)."""

    code = "OPERATOR_REGISTERED_TWICE"


class OperatorUnknown(SanaError):
    """A task names a ``type`` no operator is registered under."""

    code = "OPERATOR_UNKNOWN"


class OperatorConfigInvalid(SanaError):
    """An operator's config is not acceptable for the inputs it gets.

    Raised by an operator's schema derivation without knowing the task id;
    the validator re-raises it with the task named. ``field`` is a dotted path
    inside ``config`` (e.g. ``"columns.f"``).
    """

    code = "OPERATOR_CONFIG_INVALID"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message, culprit={"field": f"config.{field}" if field else "config"})
        self.field = field


class TopicProblem(RuntimeFailure):
    """A Kafka topic could not be listed, created or checked."""

    code = "TOPIC_PROBLEM"


class QueryFailed(RuntimeFailure):
    """A fragment's Spark query failed to start or died; the message holds Spark's error."""

    code = "QUERY_FAILED"


class KeyedOperatorUnknown(RuntimeFailure):
    """A call about a keyed operator named a task that is not a running ``window_aggregate`` or ``join``."""

    code = "KEYED_OPERATOR_UNKNOWN"


class BucketMoveInvalid(RuntimeFailure):
    """A bucket move named a bucket or a worker the operator does not have."""

    code = "BUCKET_MOVE_INVALID"


class DefragmentationFailed(RuntimeFailure):
    """A group of queries could not be run as one; the group runs as it did before."""

    code = "DEFRAGMENTATION_FAILED"


class CutNotReached(RuntimeFailure):
    """Queries bound at a cut did not process exactly up to it (one died, or time ran out)."""

    code = "CUT_NOT_REACHED"


class HandOverFailed(RuntimeFailure):
    """Tasks could not be handed over to their new places at a cut; everything runs as it did before."""

    code = "HAND_OVER_FAILED"


class TopicNotFound(RuntimeFailure):
    """A topic to read does not exist on the broker (or, at the API, is not one the caller may read)."""

    code = "TOPIC_NOT_FOUND"


class TailCursorInvalid(RuntimeFailure):
    """A cursor handed back to continue reading a topic is not one a read of that topic gave."""

    code = "TAIL_CURSOR_INVALID"
