"""Reads a folder of TensorBoard event files with TensorBoard's own reader and prints what it found
as one JSON object: the file version, the event files, and every scalar tag's [step, value] pairs.
Run by tests/cli/tensorboard_plot_cli_test.cpp with the venv of scripts/setup.sh (KILN_PYTHON)."""
import json
import os
import sys

from tensorboard.backend.event_processing import event_accumulator


def main(folder):
    acc = event_accumulator.EventAccumulator(folder, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    scalars = {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    files = sorted(f for f in os.listdir(folder) if "tfevents" in f)
    print(json.dumps({"file_version": acc.file_version, "files": files, "scalars": scalars}))


if __name__ == "__main__":
    main(sys.argv[1])
