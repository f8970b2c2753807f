"""``--predictor-bundle auto``: the cached bundle for a GPU, fitted on first use.

The bundle for GPU ``G`` lives at ``<cache>/bundles/<G>-vllm.joblib`` (cache:
``$FRONTIER_CACHE_DIR`` or ``~/.cache/frontier``). When it is missing, it is
fitted once from NVIDIA AIConfigurator's measured vLLM tables for that GPU (the
installed ``aiconfigurator-core`` package, or ``data_root``), with the default
held-out split (20 % of rows, seed 0), and written atomically with its manifest. That
takes about a minute on two cores; later runs only load it. A cached bundle whose
manifest records another ``features.FEATURES_VERSION`` (fitted by older feature code), or
that stores sklearn forests rather than compiled ones (no ``"forests": "compiled"`` in its
manifest: written before 2026-11-30), is fitted again.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable

from frontier.cache import cache_root
from frontier.gpu import get_gpu


def bundle_path(gpu: str) -> Path:
    """Where the auto bundle of ``gpu`` (any catalogue alias) is cached."""
    return cache_root() / "bundles" / f"{get_gpu(gpu).name}-vllm.joblib"


def ensure_bundle(gpu: str, data_root: Path | None = None,
                  log: Callable[[str], None] = lambda _: None) -> Path:
    """Return the cached bundle of ``gpu``, fitting it first if it does not exist yet."""
    import json

    from calibration.bundle import manifest_path
    from calibration.evaluate import calibrate
    from calibration.features import FEATURES_VERSION
    from calibration.importers.aiconfigurator import import_aiconfigurator_report, vllm_gpus

    path = bundle_path(gpu)
    name = get_gpu(gpu).name
    if path.is_file() and manifest_path(path).is_file():
        try:
            manifest = json.loads(manifest_path(path).read_text())
            version, forests = manifest.get("features_version"), manifest.get("forests")
        except (OSError, ValueError, AttributeError):
            version = forests = None
        if version == FEATURES_VERSION and forests == "compiled":
            return path
        if version != FEATURES_VERSION:
            log(f"cached bundle {path} has features version {version}, this code computes "
                f"{FEATURES_VERSION}: fitting it again")
        else:
            log(f"cached bundle {path} holds sklearn forests (fitted before they were stored "
                "compiled; it loads ~1.5 s slower): fitting it again")
    measured = vllm_gpus(data_root)
    if name not in measured:
        raise ValueError(f"--predictor-bundle auto: AIConfigurator has no vLLM tables for {name} (it has them for "
                         f"{', '.join(measured)}); give --predictor-bundle PATH (a bundle calibrated from your "
                         "own profiles) or leave the flag out for the roofline model")
    log(f"fitting the calibrated bundle for {name} from AIConfigurator's measured vLLM tables "
        f"(once; cached at {path})")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="frontier-auto-") as tmp:
        report = import_aiconfigurator_report(data_root, Path(tmp), gpus=[name])
        if not report.rows:
            raise ValueError(f"no measured vLLM tables for GPU {name}; give --predictor-bundle PATH "
                             "or drop it to use the roofline model")
        calibrate(Path(tmp), name, path)
    return path
