"""kind's default StorageClass manifest, from kind's own source, with images built here.

    python3 hack/kind-storage-manifest.py CONST_STORAGE_GO PROVISIONER_IMAGE HELPER_IMAGE

kind v0.30.0 keeps the manifest it installs as the node's default storage (rancher's
local-path-provisioner) in pkg/build/nodeimage/const_storage.go, a Go string with its
two image names spliced in. This prints it with the images hack/kind-node-image.sh
builds in their place, and `imagePullPolicy: Never` (nothing can be pulled here).
"""

from __future__ import annotations

import re
import sys


def manifest(source: str, provisioner: str, helper: str) -> str:
    found = re.search(r"const defaultStorageManifest = `(.*?)\n`\n", source, re.S)
    if found is None:
        raise SystemExit("no defaultStorageManifest constant in kind's const_storage.go")
    body = found.group(1)
    body = body.replace("` + storageProvisionerImage + `", provisioner)
    body = body.replace("` + storageHelperImage + `", helper)
    body = body.replace("imagePullPolicy: IfNotPresent", "imagePullPolicy: Never")
    if "`" in body or provisioner not in body or helper not in body:
        raise SystemExit("kind's storage manifest is not as this script expects")
    return body.lstrip("\n")


if __name__ == "__main__":
    path, provisioner_image, helper_image = sys.argv[1:]
    with open(path, encoding="utf-8") as f:
        sys.stdout.write(manifest(f.read(), provisioner_image, helper_image))
