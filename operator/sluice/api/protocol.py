"""What the task API and its clients agree on: paths, environment and reasons.

Shared by the server (`server.py`), the heartbeat sidecar (`sidecar.py`) and
the executor that starts task pods, so that none of them spells a path or a
variable of its own.
"""

from __future__ import annotations

# The pod's environment, set by the executor for the heartbeat sidecar.
URL_ENV = "SLUICE_TASK_API_URL"
TI_ID_ENV = "SLUICE_TI_ID"
TRY_NUMBER_ENV = "SLUICE_TRY_NUMBER"
TOKEN_ENV = "SLUICE_TRY_TOKEN"
INTERVAL_ENV = "SLUICE_HEARTBEAT_INTERVAL"

# Reasons in a refusal's JSON body (`{"reason": ...}`).
NOT_RUNNING = "not_running"  # 409: the try is not the running one; stop its work
NOT_FOUND = "not_found"  # 404: no such task instance; stop its work
UNAUTHORIZED = "unauthorized"  # 401: no valid token
FORBIDDEN = "forbidden"  # 403: a valid token for another try
UNAVAILABLE = "unavailable"  # 503: not written this time; retry

# A heartbeat's answer may carry a fresh token for the try (`tokens.py` says when).
REFRESH_HEADER = "Sluice-Refreshed-Token"

HEARTBEAT_ROUTE = r"/v1/tries/{ti:\d{1,19}}/{try:\d{1,10}}/heartbeat"
HEALTH_PATH = "/healthz"


def heartbeat_path(ti_id: int, try_number: int) -> str:
    return f"/v1/tries/{ti_id}/{try_number}/heartbeat"
