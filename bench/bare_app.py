"""The reference for bench/polled_calls.py: a bare FastAPI app that answers each POST
/v1/<call> with the bytes keepgreen answered it with (read once from BARE_APP_ANSWERS, a
directory of <call>.json files), so the difference is what keepgreen does per request.

Run by the benchmark as `python -m uvicorn bare_app:app`, the way `keepgreen serve` runs its app.
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import Response

ANSWERS = {
    path.stem: path.read_bytes() for path in Path(os.environ["BARE_APP_ANSWERS"]).glob("*.json")
}

app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)


@app.post("/v1/{call}")
async def answer(call: str, request: Request) -> Response:
    await request.body()  # read as keepgreen reads it
    return Response(ANSWERS[call], media_type="application/json")
