"""How every Airflow this project runs is installed: one way, for the benchmark and the
conformance suite alike (`ensure_airflow`).

Each version has one venv under the cache directory (`PINS`). It is installed with uv
as Airflow documents: `apache-airflow==VERSION` with Airflow's own constraints file
for that version and the venv's Python (`constraints-VERSION/constraints-3.11.txt` of
the apache/airflow repository), looked for in this order:

1. `bench/airflow-constraints/constraints-VERSION/constraints-PY.txt` in this checkout
   (committed, so that an install needs no access to GitHub);
2. the same path under `SLUICE_AIRFLOW_CONSTRAINTS_DIR`, or under the cache directory's
   `airflow-constraints/` (where a download is kept);
3. a download of Airflow's URL (`constraints_url`), kept in the cache.

A file is taken only if it reads as one of Airflow's generated constraints files
(`looks_like_constraints`). When none can be had, the install falls back to
`--exclude-newer DATE` (every dependency as PyPI had it on that date) and says so:
the venv's install record and every results JSON carry the method, the
constraints file's source and sha256 or why there was none, and the versions
actually installed (`uv pip freeze`). The record is written last, so a venv
without one is an install that did not finish or one made by an older harness.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import CACHE

CONSTRAINTS_URL = "https://raw.githubusercontent.com/apache/airflow/constraints-{version}/{file}"
REPO_CONSTRAINTS = Path(__file__).resolve().parent / "airflow-constraints"
UV_VENV = CACHE / "uv-venv"
RECORD = "sluice-airflow-install.json"
PYTHON = "3.11"


@dataclass(frozen=True)
class Pin:
    """Where one Airflow version lives and what it falls back to without constraints."""

    version: str
    venv: Path
    exclude_newer: str  # used only when no constraints file can be had


PINS = {
    "2.10.5": Pin("2.10.5", CACHE / "airflow-venv", "2025-02-28T00:00:00Z"),
    "3.3.2": Pin("3.3.2", CACHE / "airflow3-venv", "2026-12-01T00:00:00Z"),
}


def constraints_url(version: str, python: str = PYTHON) -> str:
    return CONSTRAINTS_URL.format(version=version, file=f"constraints-{python}.txt")


def _relative(version: str, python: str) -> Path:
    return Path(f"constraints-{version}") / f"constraints-{python}.txt"


def constraints_dirs() -> list[Path]:
    """Where a constraints file is looked for, in order (the last is where downloads go)."""
    dirs = [REPO_CONSTRAINTS]
    if os.environ.get("SLUICE_AIRFLOW_CONSTRAINTS_DIR"):
        dirs.append(Path(os.environ["SLUICE_AIRFLOW_CONSTRAINTS_DIR"]))
    dirs.append(CACHE / "airflow-constraints")
    return dirs


def looks_like_constraints(text: str) -> bool:
    """Airflow's generated constraints files open with this comment and pin with `==`."""
    head = text[:600]
    pins = [line for line in text.splitlines() if line and not line.startswith("#")]
    return (
        "This constraints file was automatically generated" in head
        and len(pins) > 50
        and all("==" in line for line in pins)
    )


@dataclass(frozen=True)
class Constraints:
    """The constraints file for one install, or why there is none (`path` None)."""

    path: Path | None
    source: str  # the file's origin, or the reason there is none
    sha256: str = ""

    def as_dict(self) -> dict[str, Any]:
        if self.path is None:
            return {"file": None, "unavailable": self.source}
        return {"file": str(self.path), "source": self.source, "sha256": self.sha256}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def find_constraints(
    version: str,
    python: str = PYTHON,
    *,
    dirs: list[Path] | None = None,
    download: bool = True,
    timeout: float = 20.0,
) -> Constraints:
    """Airflow's constraints file for `version` and `python`: a local copy, else a
    download kept in the last of `dirs`; else why not (Constraints.path None)."""
    dirs = constraints_dirs() if dirs is None else dirs
    rel = _relative(version, python)
    rejected = []
    for folder in dirs:
        path = folder / rel
        if path.is_file():
            if looks_like_constraints(path.read_text(errors="replace")):
                return Constraints(path, f"local copy {path}", _sha256(path))
            rejected.append(f"{path} is not an Airflow constraints file")
    url = constraints_url(version, python)
    if not download:
        return Constraints(None, "; ".join([*rejected, f"no local copy of {rel}"]))
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = response.read()
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        missing = f"no local copy of {rel}, and {url} could not be read: {reason}"
        return Constraints(None, "; ".join([*rejected, missing]))
    text = body.decode("utf-8", errors="replace")
    if not looks_like_constraints(text):
        return Constraints(None, f"{url} did not answer with an Airflow constraints file")
    path = dirs[-1] / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    return Constraints(path, url, _sha256(path))


def install_command(
    uv: str, pin: Pin, constraints: Constraints, extra: tuple[str, ...] = ("psycopg2-binary",)
) -> list[str]:
    """The uv command: with the constraints file when there is one, else `--exclude-newer`."""
    command = [uv, "pip", "install", f"apache-airflow=={pin.version}", *extra]
    if constraints.path is not None:
        return [*command, "--constraint", str(constraints.path)]
    return [*command, "--exclude-newer", pin.exclude_newer]


def installed_airflow(venv: Path) -> str | None:
    """The Airflow version installed in a venv, from its package metadata (no import)."""
    found = sorted(venv.glob("lib/python*/site-packages/apache_airflow-*.dist-info"))
    if not found:
        return None
    return found[0].name.removeprefix("apache_airflow-").removesuffix(".dist-info")


def installed_packages(venv: Path) -> dict[str, str]:
    """Every distribution in a venv and its version, from the package metadata."""
    found = {}
    for info in venv.glob("lib/python*/site-packages/*.dist-info"):
        name, _, version = info.name.removesuffix(".dist-info").partition("-")
        found[name.lower().replace("_", "-")] = version
    return dict(sorted(found.items()))


def install_record(venv: Path) -> dict[str, Any]:
    """How a venv was installed (its record, or what can be said without one), with
    the packages it holds now."""
    path = venv / RECORD
    record: dict[str, Any] = (
        json.loads(path.read_text())
        if path.is_file()
        else {
            "version": installed_airflow(venv),
            "method": "unknown: no install record (an older harness's install, or unfinished)",
        }
    )
    record["packages"] = installed_packages(venv)
    return record


def pin_for(version: str, venv: Path | None, exclude_newer: str | None) -> Pin:
    """The pin of `version`; a caller that names another venv or date is refused, so that
    the benchmark and the conformance suite install each Airflow the same way."""
    if version not in PINS:
        raise ValueError(f"Airflow {version} has no pin in bench.airflow_install.PINS")
    pin = PINS[version]
    if (venv is not None and venv != pin.venv) or (
        exclude_newer is not None and exclude_newer != pin.exclude_newer
    ):
        raise ValueError(
            f"Airflow {version} is installed one way ({pin}); asked for venv={venv},"
            f" exclude_newer={exclude_newer}: change bench.airflow_install.PINS instead"
        )
    return pin


def check_reuse(pin: Pin, record: dict[str, Any], constraints: Constraints) -> None:
    """Refuse a venv that is not what an install now would make (remove it to reinstall)."""
    if record.get("version") != pin.version:
        raise RuntimeError(
            f"{pin.venv} has Airflow {record.get('version')}, not {pin.version}:"
            " remove it to reinstall"
        )
    method = record.get("method", "")
    if constraints.path is not None and method == "exclude-newer":
        raise RuntimeError(
            f"{pin.venv} was installed without a constraints file ({record.get('constraints')});"
            f" one is there now ({constraints.source}): remove the venv to reinstall it pinned"
        )
    recorded = (record.get("constraints") or {}).get("sha256")
    if constraints.path is not None and recorded and recorded != constraints.sha256:
        raise RuntimeError(
            f"{pin.venv} was installed with constraints sha256 {recorded[:12]}, the file now"
            f" found ({constraints.source}) is {constraints.sha256[:12]}: remove the venv"
        )


def _uv(out: Any) -> str:
    if not (UV_VENV / "bin" / "uv").exists():
        subprocess.run([sys.executable, "-m", "venv", str(UV_VENV)], check=True)
        subprocess.run(
            [str(UV_VENV / "bin" / "pip"), "install", "--quiet", "uv"],
            check=True,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return str(UV_VENV / "bin" / "uv")


def ensure_airflow(
    log: Path,
    *,
    version: str = "2.10.5",
    venv: Path | None = None,
    exclude_newer: str | None = None,
) -> dict[str, Any]:
    """Install Airflow `version` into its venv unless it is there (minutes the first
    time); its install record either way (also in every results JSON).

    `venv` and `exclude_newer` may be given only as `PINS` has them. One install at
    a time per venv (a lock file beside it); a venv with a record is reused after
    `check_reuse`, one without a record but with Airflow's console script is taken
    as installed by an older harness (its record says so).
    """
    pin = pin_for(version, venv, exclude_newer)
    pin.venv.parent.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with (pin.venv.parent / f"{pin.venv.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        constraints = find_constraints(version)
        if (pin.venv / RECORD).is_file() or (pin.venv / "bin" / "airflow").exists():
            record = install_record(pin.venv)
            if record["version"] != pin.version or (pin.venv / RECORD).is_file():
                check_reuse(pin, record, constraints)
            return record
        if pin.venv.exists():
            # Never removed here: another process (without this lock) may be installing.
            raise RuntimeError(
                f"{pin.venv} exists without Airflow's console script or an install record:"
                " an install under way, or one that did not finish (remove it to reinstall)"
            )
        with log.open("ab") as out:
            uv = _uv(out)
            subprocess.run([uv, "venv", "--python", PYTHON, str(pin.venv)], check=True, stdout=out)
            env = {**os.environ, "VIRTUAL_ENV": str(pin.venv)}
            subprocess.run(
                install_command(uv, pin, constraints),
                check=True,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        record = {
            "version": installed_airflow(pin.venv),
            "method": "constraints" if constraints.path is not None else "exclude-newer",
            "constraints": constraints.as_dict(),
            "exclude_newer": None if constraints.path is not None else pin.exclude_newer,
            "python": PYTHON,
            "installed_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        (pin.venv / RECORD).write_text(json.dumps(record, indent=1, sort_keys=True))
        return install_record(pin.venv)
