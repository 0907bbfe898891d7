"""The merge queue scheduler: `decide(state, event, *, now, policy) -> Decision`, pure."""

from keepgreen.core.scheduler.decide import decide
from keepgreen.core.scheduler.effects import (
    BuildTestCommit,
    CancelCi,
    DeleteTestBranch,
    Effect,
    Land,
    StartCi,
)
from keepgreen.core.scheduler.events import (
    EntrySubmitted,
    Event,
    ImpactedTargetsSet,
    Landed,
    LandRefused,
    PrClosed,
    PrHeadMoved,
    QueueConfigChanged,
    ReadinessChanged,
    RestartRequested,
    StatusReported,
    TargetBranchMoved,
    TestCommitBuilt,
    TestCommitConflict,
    Tick,
    UserCancelled,
)
from keepgreen.core.scheduler.state import Decision, EngineState, Policy

__all__ = [
    "BuildTestCommit",
    "CancelCi",
    "Decision",
    "DeleteTestBranch",
    "Effect",
    "EngineState",
    "EntrySubmitted",
    "Event",
    "ImpactedTargetsSet",
    "Land",
    "LandRefused",
    "Landed",
    "Policy",
    "PrClosed",
    "PrHeadMoved",
    "QueueConfigChanged",
    "ReadinessChanged",
    "RestartRequested",
    "StartCi",
    "StatusReported",
    "TargetBranchMoved",
    "TestCommitBuilt",
    "TestCommitConflict",
    "Tick",
    "UserCancelled",
    "decide",
]
