# Setup: outside a covbook checkout (e.g. in Colab), install the book's library from
# its repository.
import importlib.util
import subprocess
import sys

COVBOOK_SOURCE = None
if importlib.util.find_spec("covbook") is None:
    # the runtime only (numpy, scipy, matplotlib, pandas; torch if missing)
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--progress-bar", "off"]
    done = subprocess.run(
        [*pip, f"covbook @ {COVBOOK_SOURCE}"], capture_output=True, text=True
    )
    if done.returncode:
        print(done.stdout, done.stderr, sep="\n", file=sys.stderr)
        raise RuntimeError("pip could not install covbook: its output is above")
    importlib.invalidate_caches()
