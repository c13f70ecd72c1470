"""Where tests find the repository and the read-only shared specification."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("KUBERAY_SHARED", REPO.parent / "shared")).resolve()
SAMPLES = SHARED / "upstream" / "kuberay-v1.7" / "samples"
CRD_SCHEMAS = SHARED / "upstream" / "crd-json-schemas"
GOLDEN = REPO / "tests" / "golden"
INVALID = REPO / "tests" / "invalid"
EXAMPLES = REPO / "examples"
