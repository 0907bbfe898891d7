"""Bounds on queue settings and request values; the HTTP schema and the services share them."""

MAX_CONCURRENCY = 1000
# 100 years. The interface allows any uint32 number of minutes (8,000 years), but a deadline
# that far lies past the calendar (year 9999), which the service's clock arithmetic cannot
# hold; 100 years is any wait anyone means.
MAX_MINUTES = 52_560_000
MAX_HOURS = MAX_MINUTES // 60  # notReadyTimeoutHours
MAX_LABEL_LENGTH = 50  # GitHub's bound on a label's name
MAX_BOT_SUBMITTERS = 100
MAX_BATCHING_RULES = 50
MAX_BATCHING_RULE_LENGTH = 4096  # one rule's JSON text
MAX_PENDING_FAILURE_DEPTH = 1000
MAX_BATCH_SIZE = 1000
MAX_UINT32 = 4_294_967_295  # the spec's bound on its counters: an unsigned 32-bit integer
MAX_PR_NUMBER = MAX_UINT32
MAX_CI_RUN_ATTEMPT = MAX_UINT32  # create-ci-run's attempt
MAX_REQUIRED_STATUSES = 100
MAX_PAGE_TAKE = 100
DEFAULT_PAGE_TAKE = 50
MAX_TEXT_LENGTH = 4096  # descriptions and target URLs of commit statuses

# How often a failed run may be retried before it counts (each retry is one more CI run).
MAX_RETRIES = 5
