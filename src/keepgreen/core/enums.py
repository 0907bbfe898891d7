"""The state vocabularies of the merge queue; wire values are the lowercase member values."""

from enum import StrEnum


class PrState(StrEnum):
    """Where a submitted pull request stands in its queue."""

    NOT_READY = "not_ready"  # submitted, but readiness not met or the queue is not admitting
    PENDING = "pending"  # admitted; waits for a testing slot
    TESTING = "testing"  # a test run that includes it is in progress
    TESTS_PASSED = "tests_passed"  # passed; waits for the PRs ahead of it to merge
    PENDING_FAILURE = "pending_failure"  # failed; waits for predecessors/successors to decide blame
    MERGED = "merged"  # landed on the target branch (terminal)
    FAILED = "failed"  # removed because it caused a failure or could not merge (terminal)
    CANCELLED = "cancelled"  # removed by a user or by a change to the PR (terminal)

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL

    @property
    def is_started(self) -> bool:
        """True once a test run has taken it (testing, or decided and not yet landed): the
        states a restart applies to, and that keep their place in the queue.
        """
        return self in _STARTED

    @property
    def is_admitted(self) -> bool:
        """True for the states counted as "in the queue" (not_ready and terminal excluded)."""
        return self in _ADMITTED


_TERMINAL = frozenset({PrState.MERGED, PrState.FAILED, PrState.CANCELLED})
_STARTED = frozenset({PrState.TESTING, PrState.TESTS_PASSED, PrState.PENDING_FAILURE})
_ADMITTED = frozenset(
    {PrState.PENDING, PrState.TESTING, PrState.TESTS_PASSED, PrState.PENDING_FAILURE}
)


class QueueState(StrEnum):
    """Whether a queue admits, tests and merges."""

    RUNNING = "running"  # admits, tests and merges
    PAUSED = "paused"  # starts no test run and merges nothing; running tests finish
    DRAINING = "draining"  # refuses new PRs; finishes what is already queued
    SWITCHING_MODES = "switching_modes"  # set by keepgreen during a mode change; like draining


class QueueMode(StrEnum):
    """How PRs depend on each other."""

    SINGLE = "single"  # one line: each PR is tested on everything ahead of it
    PARALLEL = "parallel"  # lanes from overlapping impacted targets


class MergeMethod(StrEnum):
    """How a tested PR lands on the target branch."""

    MERGE_COMMIT = "merge_commit"  # the tested merge commits land as they are
    SQUASH = "squash"  # one commit per PR whose tree is the tested tree
    REBASE = "rebase"  # the PR's commits replayed


class DirectMergeMode(StrEnum):
    """Whether an up-to-date PR may skip the test run when the queue is empty."""

    OFF = "off"  # every PR is tested by the queue
    ALWAYS = "always"  # up to date, queue (lane) empty, own checks green: merge at once


class TestBranchConstructionMode(StrEnum):
    """How the hosted service builds a test branch (accepted and stored: keepgreen builds the
    test commit in its own repository and pushes the test branch once, either way).
    """

    RENAME_TEMP_BRANCH = "rename_temp_branch"
    PUSH_NEW_BRANCH_FROM_TEMP = "push_new_branch_from_temp"


class FlakyFailures(StrEnum):
    """What a queue does with a failed run whose failed tests are all known flaky or
    quarantined (from the JUnit results uploaded for its test commit).
    """

    OFF = "off"  # the failure counts like any other
    RETRY = "retry"  # the run is tested again (at least once, up to maxRetries)
    PASS = "pass"  # noqa: S105 - a setting value, not a secret; the run counts as passed


class OptimizationMode(StrEnum):
    """Optional test-saving strategies."""

    OFF = "off"  # no optimisation
    BISECTION_SKIP_REDUNDANT_TESTS = "bisection_skip_redundant_tests"  # reuse failures in bisection


class Mergeability(StrEnum):
    """What the code host says about merging the PR onto the target branch."""

    UNSPECIFIED = "unspecified"  # not known yet
    IN_PROGRESS = "in_progress"  # the host is still computing it
    MERGEABLE = "mergeable"  # merges cleanly onto the target tip
    NOT_MERGEABLE = "not_mergeable"  # conflicts, or the target branch is missing


class TestRunStatus(StrEnum):
    """The outcome of one test run on a testing branch."""

    __test__ = False  # not a pytest test class despite its name

    QUEUED = "queued"  # a bisection run waiting for a bisection slot; nothing built yet
    IN_PROGRESS = "in_progress"  # required statuses still outstanding
    SUCCEEDED = "succeeded"  # every required status is success
    FAILED = "failed"  # a required status failed or errored, or the run timed out
    CANCELLED = "cancelled"  # abandoned before it finished (restart, cancel, preemption)


class TestRunKind(StrEnum):
    """Which capacity pool a run uses; also the `queue_type` metrics label."""

    __test__ = False

    MAIN = "main"  # counts against `concurrency`
    BISECTION = "bisection"  # counts against `bisectionConcurrency`


class CommitState(StrEnum):
    """A commit status as CI reports it."""

    PENDING = "pending"  # CI started or has not finished
    SUCCESS = "success"  # CI passed
    FAILURE = "failure"  # CI failed
    ERROR = "error"  # CI could not run
    # A check that ran nothing: it passes a run only where the queue accepts skipped checks.
    SKIPPED = "skipped"  # the check concluded it had nothing to do
    NEUTRAL = "neutral"  # the check concluded without a pass or fail verdict


class StateReason(StrEnum):
    """Why a pull request changed state; stored in its history and shown to users.

    The values are stable codes of the API (`explanation.reasonCode`, listed in the README):
    never renamed or reused, only added (with a sentence in `app/explain.py`'s REASONS).
    """

    SUBMITTED = "submitted"  # submitted or resubmitted
    READY = "ready"  # readiness met and the queue admits
    NOT_READY = "not_ready"  # readiness lost, or the queue stopped admitting
    CANCELED_BY_USER = "canceled_by_user"
    PUSHED_TO = "pushed_to"  # its head moved while queued
    PR_CLOSED = "pr_closed"
    PR_NOT_FOUND = "pr_not_found"  # submitted, but the code host has no such pull request
    RESTART_REQUESTED = "restart_requested"
    TESTS_STARTED = "tests_started"
    TESTS_PASSED = "tests_passed"
    TESTS_FAILED = "tests_failed"
    TEST_RUN_TIMEOUT = "test_run_timeout"
    MERGE_CONFLICT = "merge_conflict"
    NO_REQUIRED_STATUSES = "no_required_statuses"
    MERGED_BY_QUEUE = "merged_by_queue"
    PREDECESSOR_CHANGED = "predecessor_changed"  # a PR ahead left; re-test on a new base
    PREEMPTED = "preempted"  # an urgent PR took its place
    TARGET_BRANCH_MOVED = "target_branch_moved"  # someone else moved the branch; re-test
    BISECTING = "bisecting"  # its batch failed; halves are tested to find the culprit
    TEST_RUN_FAILED_BY_OPTIMIZATION = (
        "test_run_failed_by_optimization"  # bisection reused a failure
    )
    CLEARED_BY_SUCCESSOR = "cleared_by_successor"  # a later run that included it passed
    MERGED_DIRECTLY = "merged_directly"  # up to date, queue empty, own checks green
    MERGE_REFUSED = "merge_refused"  # the tested change no longer applies to the branch
    CI_LOST = "ci_lost"  # the built-in CI's worker died mid-run; the run started again
    PUSH_REJECTED = "push_rejected"  # the git server refused the landing push (a hook, a rule)
    CHECK_NEVER_STARTED = "check_never_started"  # a required check did not start in time
    CHECK_SKIPPED = "check_skipped"  # a required check concluded skipped or neutral
    RETRYING = "retrying"  # its failed run is tested again alone before it counts
    FLAKY_FAILURES_FORGIVEN = "flaky_failures_forgiven"  # only known flaky tests failed
    NOT_READY_TIMEOUT = "not_ready_timeout"  # not ready for the queue's notReadyTimeoutHours
    # Its failed batch was isolated beside the queue and its own run passed: it rejoins the
    # line behind the PRs in flight.
    CLEARED_BY_ISOLATION = "cleared_by_isolation"


class IncidentKind(StrEnum):
    """What went wrong with a queue's git server; stored in the queue's incident history."""

    UNREACHABLE = "unreachable"  # nothing answers, or the name does not resolve
    TIMEOUT = "timeout"  # a git call did not finish in time
    CREDENTIALS_REFUSED = "credentials_refused"  # the server said no to keepgreen's credentials
    CREDENTIAL_FILE = "credential_file"  # the token or key file cannot be used
    HOST_KEY_UNKNOWN = "host_key_unknown"  # the SSH host key is not in the known hosts
    TLS_UNTRUSTED = "tls_untrusted"  # the server's TLS certificate is not trusted
    REPOSITORY_MISSING = "repository_missing"  # no repository at the URL (or not exported)
    PUSH_REJECTED = "push_rejected"  # a push was refused by the server (a hook, a rule)
    TARGET_BRANCH_MISSING = "target_branch_missing"  # the queue's branch is not on the server
    TARGET_BRANCH_REWOUND = "target_branch_rewound"  # the branch was force-pushed backwards
    GIT_ERROR = "git_error"  # any other failure of a git call
    GITHUB_UNAVAILABLE = "github_unavailable"  # GitHub's API answered 5xx, or not in time
    GITHUB_RATE_LIMITED = "github_rate_limited"  # GitHub's API said to wait (403/429)
    GITHUB_REFUSED = "github_refused"  # the App may not do it (not installed, no permission)


# The incidents that are about reaching the server at all: they end when a pass reads it again.
SERVER_INCIDENTS = frozenset(
    {
        IncidentKind.UNREACHABLE,
        IncidentKind.TIMEOUT,
        IncidentKind.CREDENTIALS_REFUSED,
        IncidentKind.CREDENTIAL_FILE,
        IncidentKind.HOST_KEY_UNKNOWN,
        IncidentKind.TLS_UNTRUSTED,
        IncidentKind.REPOSITORY_MISSING,
        IncidentKind.GIT_ERROR,
        IncidentKind.GITHUB_UNAVAILABLE,
        IncidentKind.GITHUB_RATE_LIMITED,
        IncidentKind.GITHUB_REFUSED,
    }
)
