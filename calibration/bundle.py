"""Bundles: one joblib file of fitted predictors per GPU and framework version.

    <bundle>.joblib                 payload: {"predictors": {family: FamilyPredictor}}
    <bundle>.joblib.manifest.json   manifest (JSON), checked BEFORE the payload is unpickled

Manifest keys: bundle_format, schema_version, gpu, framework, framework_version, frameworks
(every [framework, version or null] pair the rows hold: e.g. [["sarathi-serve", null], ["vllm",
"0.24.0"]] for Vidur's profiles beside AIConfigurator's; ``source_label`` names them), families
{family: {features, training_rows, training_rows_sha256, submodels, launch_overhead_s,
launch_overhead_source}}, heldout_error {family: {rows, p50, p95, mape, baseline_*}},
split {holdout_fraction, split_seed, holdout_by, scheme}, features_version, libraries {sklearn, numpy, joblib, python},
forests ("compiled": every forest is stored as its ``tree_eval.CompiledForest``, so loading and
querying a bundle imports neither sklearn nor scipy; bundles written before 2026-11-30 hold
sklearn forests and still load), payload_sha256, payload_bytes; and "memory" (the non-KV memory terms fitted from profiled
memory rows, calibration/memory_model.py) when such rows exist.

A bundle is a pickle: loading runs code from the file. ``load_bundle`` therefore refuses
any file whose manifest is missing, unreadable, of another schema version / bundle format,
or whose sha256 differs from the manifest's, before unpickling it.

Simulations load through ``shared_bundle``: one loaded bundle per file, reused by every
simulation in the process while the file is unchanged (same size and mtime), at most
MAX_SHARED_BUNDLES files kept (least recently used dropped). Loading one per simulation
instead (~250 MB unpickled and compiled for a 57 MB AIC bundle, ~1 s) piled up: a finished
simulation's objects form reference cycles, so its bundle waited for a full garbage
collection, which numpy-heavy runs rarely trigger (a sweep worker grew ~250 MB per row).
With compiled forests in the payload, the H100 auto bundle is 28 MB and loads in ~0.3 s
(50.7 MB and ~1.7 s with sklearn forests, sklearn's import included; measured 2026-11-30).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from frontier.profile_schema import SCHEMA_VERSION

BUNDLE_FORMAT = 1
MANIFEST_SUFFIX = ".manifest.json"
MAX_SHARED_BUNDLES = 4     # loaded bundles ``shared_bundle`` keeps (one per file)
_SHARED: dict[tuple[str, int, int], "Bundle"] = {}   # (resolved path, size, mtime_ns) -> bundle, LRU order


@dataclass(frozen=True)
class Bundle:
    """A loaded bundle: predictors per family and the manifest they were checked against."""

    predictors: dict
    manifest: dict

    def predictor(self, family: str):
        if family not in self.predictors:
            raise ValueError(f"bundle for {self.manifest.get('gpu')} has no {family!r} predictor; "
                             f"has {sorted(self.predictors)}")
        return self.predictors[family]


def manifest_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + MANIFEST_SUFFIX)


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def rows_sha256(df: pd.DataFrame) -> str:
    """Order-independent sha256 of training rows (sorted, hashed with pandas' row hash)."""
    h = np.sort(pd.util.hash_pandas_object(df.reset_index(drop=True), index=False).to_numpy())
    return hashlib.sha256(h.tobytes()).hexdigest()


def library_versions() -> dict[str, str]:
    import joblib
    import numpy
    import sklearn
    return {"sklearn": sklearn.__version__, "numpy": numpy.__version__, "joblib": joblib.__version__,
            "python": platform.python_version()}


def save_bundle(path: str | Path, predictors: dict, manifest: dict, memory: dict | None = None) -> dict:
    """Write payload + sidecar manifest atomically; returns the full manifest written.

    `memory`: the fitted memory entry (calibration.memory_model.memory_entry), stored as the
    manifest's "memory" key when given.
    """
    import joblib

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")   # per process: concurrent first fits do not share it
    joblib.dump({"predictors": predictors}, tmp, compress=3)
    full = dict(manifest)
    if memory:
        full["memory"] = memory
    from calibration.features import FEATURES_VERSION

    full.update(bundle_format=BUNDLE_FORMAT, schema_version=SCHEMA_VERSION, features_version=FEATURES_VERSION,
                forests="compiled", libraries=library_versions(), payload_sha256=sha256_file(tmp),
                payload_bytes=tmp.stat().st_size)
    mtmp = manifest_path(tmp)
    mtmp.write_text(json.dumps(full, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    os.replace(mtmp, manifest_path(path))
    return full


def source_label(manifest: dict) -> str:
    """The frameworks a bundle was fitted on, for people: "vllm 0.24.0", "sarathi-serve",
    "sarathi-serve + vllm 0.24.0" (manifests without ``frameworks``: framework and version)."""
    pairs = manifest.get("frameworks")
    if pairs:
        return " + ".join(str(f) if v in (None, "") else f"{f} {v}" for f, v in pairs)
    framework, version = manifest.get("framework", "vllm"), manifest.get("framework_version")
    return str(framework) if version in (None, "") else f"{framework} {version}"


def read_manifest(path: str | Path) -> dict:
    """The checked manifest of a bundle (ValueError, one line, if it does not check out)."""
    path = Path(path)
    mpath = manifest_path(path)
    if not path.is_file():
        raise ValueError(f"bundle {path} does not exist")
    if not mpath.is_file():
        raise ValueError(f"bundle {path} has no manifest {mpath.name}; refusing to unpickle it")
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"bundle manifest {mpath} is unreadable ({type(exc).__name__}); refusing the bundle") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"bundle manifest {mpath} is not a JSON object; refusing the bundle")
    if manifest.get("bundle_format") != BUNDLE_FORMAT:
        raise ValueError(f"bundle {path} has bundle_format {manifest.get('bundle_format')!r}; "
                         f"this code reads {BUNDLE_FORMAT}")
    if manifest.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"bundle {path} was built for profile schema_version "
                         f"{manifest.get('schema_version')!r}; this code reads {SCHEMA_VERSION}")
    digest = sha256_file(path)
    if digest != manifest.get("payload_sha256"):
        raise ValueError(f"bundle {path} sha256 {digest[:12]}… does not match its manifest "
                         f"({str(manifest.get('payload_sha256'))[:12]}…): corrupt or foreign file")
    return manifest


def load_bundle(path: str | Path) -> Bundle:
    """Check the manifest, then unpickle. ValueError (one line) on anything that does not check out."""
    import joblib

    from calibration.features import FEATURES_VERSION
    from calibration.predictors.base import FamilyPredictor

    manifest = read_manifest(path)
    if manifest.get("features_version") != FEATURES_VERSION:
        raise ValueError(f"bundle {path} was fitted with features version {manifest.get('features_version')}; "
                         f"this code computes version {FEATURES_VERSION}: refit it with `frontier calibrate`")
    try:
        payload = joblib.load(path)
    except Exception as exc:  # a matching hash but an unloadable pickle (e.g. library mismatch)
        raise ValueError(f"bundle {path} could not be unpickled ({type(exc).__name__}: {exc}); "
                         f"built with {manifest.get('libraries')}") from None
    preds = payload.get("predictors") if isinstance(payload, dict) else None
    if not isinstance(preds, dict) or not all(isinstance(p, FamilyPredictor) for p in preds.values()):
        raise ValueError(f"bundle {path} does not hold frontier predictors")
    return Bundle(predictors=preds, manifest=manifest)


def shared_bundle(path: str | Path) -> Bundle:
    """``load_bundle(path)``, loaded once per process while the file is unchanged.

    The key is (resolved path, size, mtime_ns): a rewritten file is checked and loaded
    again and replaces its old entry. At most MAX_SHARED_BUNDLES bundles stay loaded,
    least recently used dropped first. Callers share the predictors, so they must treat
    them as read-only apart from their memo caches (``FamilyPredictor.reset_cache``).
    """
    resolved = Path(path).resolve()
    try:
        st = resolved.stat()
    except OSError:
        return load_bundle(path)          # the one-line error for a missing file
    key = (str(resolved), st.st_size, st.st_mtime_ns)
    bundle = _SHARED.pop(key, None)
    if bundle is None:
        for old in [k for k in _SHARED if k[0] == key[0]]:
            del _SHARED[old]
        bundle = load_bundle(path)
        while len(_SHARED) >= MAX_SHARED_BUNDLES:
            del _SHARED[next(iter(_SHARED))]
    _SHARED[key] = bundle                 # most recently used last
    return bundle


def shared_bundles() -> int:
    """How many loaded bundles ``shared_bundle`` holds."""
    return len(_SHARED)
