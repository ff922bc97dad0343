#!/usr/bin/env bash
# Rebuild the Sluice image (and the bundled Postgres one) from this checkout and
# load them into the running local cluster's containerd (no registry: the
# kubelet finds them there).
#
#   hack/load-image.sh
#
# A no-op when neither the images' inputs nor containerd's copies changed. Pods
# started afterwards run the new image (it keeps its name, localhost/sluice:dev,
# so running pods are not restarted: delete them, or `kubectl rollout restart`).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
D="$SLUICE_CLUSTER_DIR"
[[ -f "$D/env" ]] || die "no local cluster running (no $D/env): run hack/cluster-up.sh"
# shellcheck disable=SC1091
source "$D/env"
"$SLUICE_ROOT/hack/build-images.sh"
mkdir -p "$D/logs"
import_images "$CONTAINERD_SOCK" "$CONTAINERD_ROOT" "$D/logs/ctr-import.log" sluice postgres
