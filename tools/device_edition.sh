#!/usr/bin/env bash
# The book's edition on a GPU machine without a package index, in one command, from the repository root:
#
#   bash tools/device_edition.sh [PROFILE] [DEVICE]        (default: full cuda)
#
# It brings what the machine lacks from the wheels carried in tools/wheels/ (made here beforehand by
# `bash tools/device_edition.sh wheels`: papermill, jupytext, ipykernel, nbclient, nbformat, myst-nb and their
# needs as cp312 wheels; numpy, scipy, matplotlib, pandas, pyyaml, tqdm and torch are the machine's own), runs
# `covbook edition PROFILE --device DEVICE` with every notebook at once (EDITION_JOBS, default 6), and packs
# book/edition, the machine's timings and the log into one file, $OUT/edition.tar.gz (or ./edition.tar.gz),
# refused above 16 MiB. Unpack it in the repository root (`tar xzf edition.tar.gz`) and commit book/edition.
#
#   EDITION_JOBS       notebooks at once (default 6)
#   EDITION_TIMEOUT    each notebook's time limit in seconds (default 480)
#   EDITION_PYTHON     the interpreter that has torch (default python3)
#   EDITION_NOTEBOOKS  a subset, e.g. "01 08" (default: every chapter)
#   EDITION_COMMIT     the commit the tree is at (default: git's; a copy without .git must be told)
#   EDITION_WHEELS     the wheels' folder (default tools/wheels); EDITION_WHEEL_PYTHON their Python (3.12)
#   EDITION_FORCE_WHEELS=1  install from the wheels even where EDITION_PYTHON has every module (a rehearsal)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WHEELS=${EDITION_WHEELS:-$ROOT/tools/wheels}
MAX_BYTES=$((16 * 1024 * 1024))
PY=${EDITION_PYTHON:-python3}
# what the device image lacks; installed with their needs from the carried wheels
NEEDED="papermill jupytext ipykernel nbclient nbformat myst-nb filelock"
# what it has (never carried: large, and the image's builds match its torch)
IMAGE_OWN="numpy scipy matplotlib pandas pyyaml tqdm torch pillow"

if [[ ${1:-} == wheels ]]; then  # here, with an index: download the wheels the device lacks
  mkdir -p "$WHEELS"
  "$PY" -m pip download --dest "$WHEELS" --python-version "${EDITION_WHEEL_PYTHON:-3.12}" --implementation cp \
    --only-binary=:all: \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --platform linux_x86_64 $NEEDED
  for p in $IMAGE_OWN; do rm -f "$WHEELS"/"$p"-*.whl "$WHEELS"/"${p^}"-*.whl; done
  du -sh "$WHEELS"
  exit 0
fi

PROFILE=${1:-full}
DEVICE=${2:-cuda}
OUTDIR=${OUT:-$ROOT}
LOG=$ROOT/.covbook/device-edition.log
mkdir -p "$ROOT/.covbook" "$OUTDIR"
exec > >(tee "$LOG") 2>&1
echo "device_edition: $PROFILE on $DEVICE; $($PY -c 'import sys; print(sys.version.split()[0])')"

# the modules the edition needs that $1 lacks (their package names)
lacks() {
  "$1" - <<'EOF'
import importlib.util
need = {"papermill": "papermill", "jupytext": "jupytext", "ipykernel": "ipykernel", "nbclient": "nbclient",
        "nbformat": "nbformat", "myst_nb": "myst-nb", "filelock": "filelock"}
print(" ".join(pkg for mod, pkg in need.items() if importlib.util.find_spec(mod) is None))
EOF
}
RUNPY=$PY
missing=$(lacks "$PY")
if [[ -n $missing || -n ${EDITION_FORCE_WHEELS:-} ]]; then
  # an environment that sees the machine's own packages, plus the carried wheels
  [[ -d $WHEELS ]] || { echo "device_edition: $PY lacks $missing and there is no $WHEELS (run 'bash tools/device_edition.sh wheels' where an index is reachable)"; exit 1; }
  VENV=$ROOT/.covbook/device-venv
  [[ -x $VENV/bin/python ]] || "$PY" -m venv --system-site-packages "$VENV"
  RUNPY=$VENV/bin/python
  missing=$(lacks "$RUNPY")
  # shellcheck disable=SC2086
  [[ -z $missing ]] || "$RUNPY" -m pip install --quiet --no-index --find-links "$WHEELS" $missing
fi
# covbook itself, from this tree, without touching an index (no build step: its sources on the path)
export PYTHONPATH=$ROOT/src${PYTHONPATH:+:$PYTHONPATH}
"$RUNPY" -m ipykernel install --sys-prefix --name covbook --display-name "Python 3 (covbook)" >/dev/null
"$RUNPY" -c "import torch; print('device_edition: torch', torch.__version__, 'cuda', torch.version.cuda, \
'available' if torch.cuda.is_available() else 'NOT available', torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"

COVBOOK_EDITION_COMMIT=${EDITION_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}
export COVBOOK_EDITION_COMMIT
echo "device_edition: commit $COVBOOK_EDITION_COMMIT"
"$RUNPY" -m covbook.book.cli run --plan --profile "$PROFILE" --device "$DEVICE" --jobs "${EDITION_JOBS:-6}" \
  ${EDITION_NOTEBOOKS:-} || true
status=0
# shellcheck disable=SC2086
"$RUNPY" -m covbook.book.cli edition "$PROFILE" ${EDITION_NOTEBOOKS:-} --device "$DEVICE" \
  --jobs "${EDITION_JOBS:-6}" --timeout "${EDITION_TIMEOUT:-480}" --no-progress || status=$?
"$RUNPY" -m covbook.book.cli check >/dev/null 2>"$ROOT/.covbook/device-check.txt" || true
grep -E "edition" "$ROOT/.covbook/device-check.txt" || true

# what must come back: the edition, this machine's timings (the plan's calibration) and the log
PACK=$OUTDIR/edition.tar.gz
extra=(.covbook/device-edition.log .covbook/device-check.txt)
[[ -f $ROOT/.covbook/timings.json ]] && extra+=(.covbook/timings.json)
tar czf "$PACK" -C "$ROOT" book/edition "${extra[@]}"
size=$(stat -c %s "$PACK")
echo "device_edition: $PACK $((size / 1024)) KiB (limit $((MAX_BYTES / 1024)) KiB); covbook edition exit $status"
if (( size > MAX_BYTES )); then
  echo "device_edition: the pack is over 16 MiB; not kept"
  rm -f "$PACK"
  exit 1
fi
exit $status
