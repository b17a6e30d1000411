"""Errors the manager raises; ``api/error_answers.py`` maps them to HTTP answers."""

from __future__ import annotations

from sana.exceptions import SanaError


class DataflowInvalid(SanaError):
    """A submitted dataflow breaks a rule of the dataflow document (manager/validate.py)."""

    code = "DATAFLOW_INVALID"


class DocumentMalformed(DataflowInvalid):
    """The body is not JSON, or a field is missing or of the wrong kind."""

    code = "DOCUMENT_INVALID"


class NotJson(DocumentMalformed):
    """The body does not parse as JSON."""

    code = "NOT_JSON"


class TaskIdDuplicate(DataflowInvalid):
    """Two tasks share an id."""

    code = "TASK_ID_DUPLICATE"


class StreamUnknownTask(DataflowInvalid):
    """A stream names a task the document does not have."""

    code = "STREAM_UNKNOWN_TASK"


class StreamDuplicate(DataflowInvalid):
    """The same stream (from, to, port) appears twice."""

    code = "STREAM_DUPLICATE"


class DagCycle(DataflowInvalid):
    """The streams form a cycle."""

    code = "DAG_CYCLE"


class SourceHasInputs(DataflowInvalid):
    """A stream ends at a source."""

    code = "SOURCE_HAS_INPUTS"


class SinkHasOutputs(DataflowInvalid):
    """A stream starts at a sink."""

    code = "SINK_HAS_OUTPUTS"


class TaskReachesNoSink(DataflowInvalid):
    """A task's output reaches no sink, so nothing would ever use it."""

    code = "TASK_REACHES_NO_SINK"


class OperatorTypeUnknown(DataflowInvalid):
    """A task's ``type`` names no registered operator."""

    code = "OPERATOR_UNKNOWN"


class OperatorConfigRejected(DataflowInvalid):
    """A task's config is not accepted by its operator (unknown key, bad SQL, missing column...)."""

    code = "OPERATOR_CONFIG_INVALID"


class PortInvalid(DataflowInvalid):
    """A stream arrives on a port the operator lacks, or a port gets too few or too many streams."""

    code = "PORT_INVALID"


class SinkTopicConflict(DataflowInvalid):
    """Two sinks of one document compute different streams but write the same topic."""

    code = "SINK_TOPIC_CONFLICT"


class SinkTopicTaken(DataflowInvalid):
    """A new sink would write a topic that another owner's running sink writes (or another instance of itself)."""

    code = "SINK_TOPIC_TAKEN"


class DataflowDuplicate(SanaError):
    """A submit asking to be unique is identical to a dataflow its owner already runs (the same sinks writing the same
    topics: manager/duplicates.py); ``culprit["dataflow"]`` names it. Nothing changed."""

    code = "DATAFLOW_DUPLICATE"


class DataflowNotFound(SanaError):
    """No submitted dataflow has this id."""

    code = "DATAFLOW_NOT_FOUND"


class StateUnavailable(SanaError):
    """Redis, which holds the manager's state, does not answer."""

    code = "STATE_UNAVAILABLE"


class StateBusy(SanaError):
    """Another manager holds the state lock for longer than we wait."""

    code = "STATE_BUSY"


class StateCorrupt(SanaError):
    """What Redis holds contradicts itself (refcounts, indexes, mappings)."""

    code = "STATE_CORRUPT"


class DeployFailed(SanaError):
    """The runtime could not apply a change; the state and running work are as before."""

    code = "DEPLOY_FAILED"


class LimitExceeded(SanaError):
    """A change would take a caller over one of its limits (``culprit["limit"]`` names the setting)."""

    code = "LIMIT_EXCEEDED"


class ServiceFull(SanaError):
    """A change would take the whole service over a limit; it takes no more until something is removed."""

    code = "SERVICE_FULL"
