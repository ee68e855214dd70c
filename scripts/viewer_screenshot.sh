#!/usr/bin/env bash
# Screenshot a run's viewer.html with Debian's headless Chromium (no network, no GPU):
#   bash scripts/viewer_screenshot.sh <run dir> [out.png]      (default docs/img/capstone_viewer.png)
set -euo pipefail
run=$1
out=${2:-docs/img/capstone_viewer.png}
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --user-data-dir="$profile" --hide-scrollbars \
  --window-size=1200,2600 --screenshot="$(realpath -m "$out")" "file://$(realpath "$run")/viewer.html" 2>/dev/null
echo "wrote $out"
