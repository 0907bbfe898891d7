"""Deterministic pytest-style JUnit XML reports for the flaky-test benchmarks.

A `Suite` is a test suite of `size` tests whose names, files and classes follow from the test's
index alone, so every report of one suite names the same tests and each run (a commit, a
shard) only changes which of them fail. A report is what pytest writes with
`junit_family=xunit1` (the family that keeps `file` and `line`): a `testsuites` root, one
`testsuite`, `testcase` elements with classname, name, file, line and time; about 3% of them
failing with a 30-50-line pytest traceback (a tenth of those as errors in setup), a fixed 2%
skipped, and 5% with captured output in `system-out`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

FAILING_SHARE = 0.03
SKIPPED_EVERY = 50  # test indices divisible by this are always skipped (a skip marker)
OUTPUT_EVERY = 20  # and these print something pytest captures
FLAKY_POOL_EVERY = 25  # 4% of the suite is a pool of flaky tests most failures come from
FROM_FLAKY_POOL = 0.6  # share of a run's failures drawn from that pool

AREAS = ("api", "billing", "core", "db", "auth", "search", "storage", "sched", "web", "cli")
NOUNS = ("invoice", "user", "token", "order", "queue", "report", "session", "cache", "page")
VERBS = ("creates", "rejects", "updates", "lists", "deletes", "retries", "parses", "renders")
ERRORS = (
    ("AssertionError", "assert {a} == {b}"),
    ("KeyError", "'{noun}_{a}'"),
    ("TimeoutError", "timed out after {a}.0 seconds waiting for {noun}"),
    ("ValueError", "invalid literal for int() with base 10: '{noun}{b}'"),
    ("ConnectionRefusedError", "[Errno 111] Connection refused"),
)


@dataclass(frozen=True)
class Case:
    """One test of a suite: where pytest finds it and what it calls it."""

    classname: str
    name: str
    file: str
    line: int


@dataclass(frozen=True)
class Suite:
    """`size` tests, named after `prefix` (so two suites of one repository never share a
    test) and numbered from 0.
    """

    prefix: str
    size: int

    def case(self, index: int) -> Case:
        area = AREAS[index % len(AREAS)]
        module = f"test_{NOUNS[(index // 10) % len(NOUNS)]}_{(index // 90) % 400}"
        package = f"tests.{self.prefix}.{area}"
        cls = f"Test{VERBS[(index // 7) % len(VERBS)].capitalize()}{index % 13}"
        name = f"test_{VERBS[index % len(VERBS)]}_{NOUNS[index % len(NOUNS)]}_{index}"
        if index % 3 == 0:
            name += f"[param-{index % 17}]"
        return Case(
            classname=f"{package}.{module}.{cls}",
            name=name,
            file=f"tests/{self.prefix}/{area}/{module}.py",
            line=10 + (index * 7) % 900,
        )

    def failing(self, run_seed: int, indices: range) -> set[int]:
        """Which of `indices` fail in run `run_seed`: 3% of them, most from the flaky pool."""
        rng = random.Random(f"{self.prefix}:{run_seed}:{indices.start}")  # noqa: S311 (bench data)
        count = max(1, round(len(indices) * FAILING_SHARE))
        pool = [i for i in indices if i % FLAKY_POOL_EVERY == 1]
        chosen: set[int] = set()
        from_pool = min(len(pool), round(count * FROM_FLAKY_POOL))
        chosen.update(rng.sample(pool, from_pool))
        runnable = [i for i in indices if i % SKIPPED_EVERY != 0 and i not in chosen]
        chosen.update(rng.sample(runnable, min(len(runnable), count - len(chosen))))
        return chosen


def traceback(case: Case, rng: random.Random) -> tuple[str, str, str]:
    """(error type, message, pytest's long traceback of 30-50 lines) for a failure of `case`."""
    kind, template = ERRORS[rng.randrange(len(ERRORS))]
    words = {"a": rng.randint(0, 999), "b": rng.randint(0, 999), "noun": rng.choice(NOUNS)}
    message = template.format(**words)
    helper = f"src/app/{rng.choice(AREAS)}/{rng.choice(NOUNS)}s.py"
    lines = [f"{case.file.replace('/', '.').removesuffix('.py')}.{case.name}"]
    lines.append("")
    lines.append(f"self = <{case.classname} object at 0x7f{rng.randrange(16**10):010x}>")
    lines.append(f"client = <TestClient base_url='http://testserver/{rng.choice(NOUNS)}'>")
    lines.append("")
    lines.append(f"    def {case.name.split('[')[0]}(self, client):")
    for step in range(rng.randint(6, 14)):
        noun = rng.choice(NOUNS)
        lines.append(f"        {noun}_{step} = make_{noun}(client, size={rng.randint(1, 500)})")
    lines.append("        response = client.post(")
    lines.append(f'            "/v1/{rng.choice(NOUNS)}s", json={{"id": {words["a"]}}}')
    lines.append("        )")
    lines.append(">       assert response.json()['count'] == expected_count(" + words["noun"] + ")")
    lines.append("")
    lines.append(f"{case.file}:{case.line + rng.randint(3, 40)}: ")
    lines.append("_ " * 37 + "_")
    lines.append("")
    lines.append(f"{words['noun']} = '{words['noun']}_{words['b']}'")
    lines.append("")
    lines.append(f"    def expected_count({words['noun']}):")
    lines.extend(
        f"        rows = query_{step}(session, {words['noun']}, limit={step * 10})"
        for step in range(rng.randint(4, 10))
    )
    lines.append(f">       raise {kind}({message!r})")
    lines.append(f"E       {kind}: {message}")
    lines.extend(
        f"E         where {rng.randint(0, 99)} = len([<Row {step}>, <Row {step + 1}>])"
        for step in range(rng.randint(2, 6))
    )
    lines.append("")
    lines.append(f"{helper}:{rng.randint(10, 800)}: {kind}")
    return kind, message, "\n".join(lines)


def report(
    suite: Suite, indices: range, *, run_seed: int, timestamp: str = "2026-12-01T10:00:00"
) -> bytes:
    """The JUnit XML pytest writes for the tests `indices` of `suite` in run `run_seed`."""
    rng = random.Random(f"report:{suite.prefix}:{run_seed}:{indices.start}")  # noqa: S311
    failing = suite.failing(run_seed, indices)
    parts: list[str] = []
    failures = errors = skipped = 0
    total_time = 0.0
    for index in indices:
        case = suite.case(index)
        seconds = round(rng.expovariate(1 / 0.05), 3)
        total_time += seconds
        head = (
            f"<testcase classname={quoteattr(case.classname)} name={quoteattr(case.name)} "
            f'file="{case.file}" line="{case.line}" time="{seconds}"'
        )
        body = ""
        if index in failing:
            kind, message, trace = traceback(case, rng)
            if rng.random() < 0.1:
                errors += 1
                tag, message = "error", f'failed on setup with "{kind}: {message}"'
            else:
                failures += 1
                tag, message = "failure", f"{kind}: {message}"
            body = f"<{tag} message={quoteattr(message)}>{escape(trace)}</{tag}>"
        elif index % SKIPPED_EVERY == 0:
            skipped += 1
            reason = f"requires {rng.choice(('postgres', 'redis', 'network', 'linux'))}"
            body = (
                f'<skipped type="pytest.skip" message="{reason}">'
                f"{case.file}:{case.line}: {reason}</skipped>"
            )
        if index % OUTPUT_EVERY == 5:
            logged = "\n".join(
                f"INFO     app.{rng.choice(AREAS)}:{rng.choice(NOUNS)}s.py:{rng.randint(1, 400)} "
                f"{rng.choice(VERBS)} {rng.choice(NOUNS)} id={rng.randint(1, 10**6)}"
                for _ in range(rng.randint(1, 6))
            )
            body += f"<system-out>{escape(logged)}</system-out>"
        parts.append(f"{head}>{body}</testcase>" if body else f"{head} />")
    header = (
        '<?xml version="1.0" encoding="utf-8"?><testsuites>'
        f'<testsuite name="pytest" errors="{errors}" failures="{failures}" '
        f'skipped="{skipped}" tests="{len(indices)}" time="{total_time:.3f}" '
        f'timestamp="{timestamp}" hostname="ci-runner-{run_seed % 7}">'
    )
    return (header + "".join(parts) + "</testsuite></testsuites>\n").encode()


def failing_names(suite: Suite, indices: range, *, run_seed: int) -> set[tuple[str, str]]:
    """(classname, name) of the tests that fail in `report(suite, indices, run_seed=...)`."""
    return {
        (case.classname, case.name)
        for case in (suite.case(i) for i in suite.failing(run_seed, indices))
    }
