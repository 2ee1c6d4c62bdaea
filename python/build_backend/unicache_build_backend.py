"""The package's PEP 517 / PEP 660 build backend: standard library only.

pip builds a project in an isolated environment where it first installs the
backend named in pyproject.toml; setuptools from an index needs the network,
which neither CI nor users can be assumed to have. This backend lives in the
tree (`backend-path`), requires nothing, and writes a pure-Python wheel
(py3-none-any) of the `unicache` package, an sdist, and an editable wheel (a
.pth file naming this folder). Metadata comes from pyproject.toml's
[project] table (the simple subset used there) and the version from
unicache/_version.py.
"""
from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "unicache"
TAG = "py3-none-any"
EPOCH = (1980, 1, 1, 0, 0, 0)  # zip's earliest date: wheels are reproducible


def _project() -> Dict[str, Any]:
    """[project] and its sub-tables from pyproject.toml: strings and one-line string lists."""
    table: Dict[str, Any] = {}
    section = None
    for raw in (ROOT / "pyproject.toml").read_text().splitlines():
        line = re.sub(r"(^|\s+)#.*$", "", raw).strip()  # a comment: the whole line, or after a space
        if line.startswith("["):
            section = line.strip("[]")
            continue
        if section is None or not section.startswith("project") or "=" not in line:
            continue
        key, value = (part.strip() for part in line.split("=", 1))
        parsed: Any = re.findall(r'"([^"]*)"', value) if value.startswith("[") else value.strip('"')
        if section == "project":
            table[key] = parsed
        else:
            table.setdefault(section[len("project."):], {})[key.strip('"')] = parsed
    version = re.search(r'__version__ = "([^"]+)"', (ROOT / PACKAGE / "_version.py").read_text())
    assert version, "unicache/_version.py holds no __version__"
    table["version"] = version.group(1)
    return table


def _metadata() -> str:
    p = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}",
             f"Summary: {p.get('description', '')}", f"Requires-Python: {p.get('requires-python', '>=3.9')}"]
    for dependency in p.get("dependencies", []):
        lines.append(f"Requires-Dist: {dependency}")
    for extra, requirements in p.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {r}; extra == "{extra}"' for r in requirements]
    return "\n".join(lines) + "\n"


def _entry_points() -> str:
    """entry_points.txt: each [project.entry-points.GROUP] table as an INI section."""
    sections = []
    for key, table in _project().items():
        if key.startswith("entry-points.") and isinstance(table, dict):
            lines = [f"[{key[len('entry-points.'):]}]"] + [f"{name} = {target}" for name, target in table.items()]
            sections.append("\n".join(lines) + "\n")
    return "\n".join(sections)


def _dist_name() -> Tuple[str, str]:
    p = _project()
    return str(p["name"]).replace("-", "_"), str(p["version"])


def _package_files() -> List[Path]:
    return sorted(f for f in (ROOT / PACKAGE).rglob("*")
                  if f.is_file() and "__pycache__" not in f.parts and f.suffix in (".py", ".typed"))


def _write_wheel(directory: str, files: Dict[str, bytes]) -> str:
    name, version = _dist_name()
    info = f"{name}-{version}.dist-info"
    files[f"{info}/METADATA"] = _metadata().encode()
    entry_points = _entry_points()
    if entry_points:
        files[f"{info}/entry_points.txt"] = entry_points.encode()
    files[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: unicache_build_backend\nRoot-Is-Purelib: true\n"
                              f"Tag: {TAG}\n").encode()
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = f"{name}-{version}-{TAG}.whl"
    with zipfile.ZipFile(os.path.join(directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            entry = zipfile.ZipInfo(path, EPOCH)
            entry.external_attr = 0o644 << 16
            z.writestr(entry, data, zipfile.ZIP_DEFLATED)
    return wheel


def build_wheel(wheel_directory: str, config_settings: Optional[dict] = None,
                metadata_directory: Optional[str] = None) -> str:
    return _write_wheel(wheel_directory, {f.relative_to(ROOT).as_posix(): f.read_bytes() for f in _package_files()})


def build_editable(wheel_directory: str, config_settings: Optional[dict] = None,
                   metadata_directory: Optional[str] = None) -> str:
    """A wheel whose .pth file puts this folder (python/) on sys.path: edits take effect at once."""
    return _write_wheel(wheel_directory, {f"{PACKAGE}_editable.pth": (str(ROOT) + "\n").encode()})


def build_sdist(sdist_directory: str, config_settings: Optional[dict] = None) -> str:
    name, version = _dist_name()
    base = f"{name}-{version}"
    members = [ROOT / "pyproject.toml", Path(__file__)] + _package_files()
    members += sorted(f for f in (ROOT / "tests").glob("*.py"))
    archive = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, archive), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        def add(path: str, data: bytes) -> None:
            entry = tarfile.TarInfo(f"{base}/{path}")
            entry.size, entry.mode = len(data), 0o644
            tar.addfile(entry, io.BytesIO(data))
        add("PKG-INFO", _metadata().encode())
        for f in members:
            add(f.relative_to(ROOT).as_posix(), f.read_bytes())
    return archive


def _no_requirements(config_settings: Optional[dict] = None) -> List[str]:
    return []


get_requires_for_build_wheel = _no_requirements
get_requires_for_build_sdist = _no_requirements
get_requires_for_build_editable = _no_requirements
