"""The dashboard's templates: one Jinja2 environment (autoescaped) and the filters pages use
to show times relative and absolute, durations, and links inside keepgreen.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markdown_it import MarkdownIt
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse

from keepgreen.core.model import RepoRef

TEMPLATES = Path(__file__).parents[1] / "templates"
STATIC = Path(__file__).parents[1] / "static"
HTMX = "vendor/htmx-2.0.11.min.js"


def ago(moment: datetime | None, now: datetime | None = None, *, coarse: bool = False) -> str:
    """`moment` relative to now, in the largest unit that fits ("3 min ago", "in 2 h");
    `coarse` counts whole minutes, for parts of a page that must not change every second.
    """
    if moment is None:
        return "never"
    seconds = ((now or datetime.now(UTC)) - moment).total_seconds()
    if abs(seconds) < (60 if coarse else 1):
        return "under a minute ago" if coarse else "just now"
    words = duration(timedelta(seconds=abs(seconds)), coarse=coarse)
    return f"{words} ago" if seconds > 0 else f"in {words}"


def duration(delta: timedelta | None, *, coarse: bool = False) -> str:
    """A duration in at most two units: "45 s", "3 min 20 s", "2 h 5 min", "3 d 4 h";
    `coarse` leaves out the seconds ("under 1 min", "3 min").
    """
    if delta is None:
        return "-"
    seconds = int(delta.total_seconds())
    if seconds < 60:
        return "under 1 min" if coarse else f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s" if seconds and not coarse else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def absolute(moment: datetime | None) -> str:
    """A moment in UTC to the second, as shown beside relative times."""
    if moment is None:
        return ""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def many(count: int, word: str) -> str:
    """`count` and `word`, plural unless one: "1 failure", "3 failures"."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def short_absolute(moment: datetime) -> str:
    """A moment in UTC to the minute, shown beside its relative time: "Nov 25 16:11 UTC"."""
    return moment.astimezone(UTC).strftime("%b %d %H:%M UTC")


def queue_path(org: str, repo: RepoRef, branch: str) -> str:
    """The queue page's path; the branch comes last since it may hold slashes."""
    parts = (org, "queues", repo.host, repo.owner, repo.name)
    return "/" + "/".join(quote(part, safe="") for part in parts) + "/" + quote(branch, safe="/")


def query(values: Mapping[str, object]) -> str:
    """`?a=1&b=2` of the values that are set, or "" when none is."""
    kept = {key: str(value) for key, value in values.items() if value not in (None, "")}
    return f"?{urlencode(kept)}" if kept else ""


# CommonMark with raw HTML off: text from PRs and CI is shown, never run.
_MARKDOWN = MarkdownIt("commonmark", {"html": False})


def markdown(text: str) -> Markup:
    """Markdown (keepgreen's own explanations, which quote PR titles and CI) as safe HTML."""
    return Markup(_MARKDOWN.render(text))  # noqa: S704 (raw HTML is off; the rest is escaped)


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ago"] = ago
    env.filters["duration"] = duration
    env.filters["absolute"] = absolute
    env.filters["short_absolute"] = short_absolute
    env.filters["markdown"] = markdown
    env.globals["queue_path"] = queue_path
    env.globals["query"] = query
    env.globals["many"] = many
    env.globals["quote"] = lambda value: quote(str(value), safe="")
    env.globals["htmx"] = HTMX
    return env


ENVIRONMENT = _environment()


def fragment(request: Request, template: str, context: Mapping[str, Any]) -> str:
    """Render `template` (a part of a page) with `context`, the signed-in org and the request."""
    values = {"request": request, "signed_in": getattr(request.state, "signed_in", None)}
    values.update(context)
    return str(ENVIRONMENT.get_template(template).render(values))


def page(
    request: Request,
    template: str,
    context: Mapping[str, Any],
    *,
    status_code: int = 200,
    headers: Mapping[str, str] | None = None,
) -> HTMLResponse:
    """Render `template` with `context`, the signed-in org (if any) and the request."""
    html = fragment(request, template, context)
    return HTMLResponse(html, status_code=status_code, headers=dict(headers or {}))
