#!/usr/bin/env python3
"""Reads compute-sanitizer memcheck logs and says which reports are kiln's.

    memcheck_report.py CONTROL_LOG LOG...

CONTROL_LOG is memcheck's log of a process that only creates and destroys a cuDNN handle (the
libraries' own state): cuDNN keeps a few allocations of its first cudnnCreate for the life of the
process, freed by no call, and memcheck's leak check reports them in every program that uses cuDNN.
A report in LOG that the control also shows (the same kind and size, allocated under the same
library entry point) is the library's; every other report (an access error, a failed API call, a
leak of kiln's) is a finding. Prints each log's reports by class; exits 1 when any log has a
finding or has no ERROR SUMMARY (the process did not finish under the sanitizer).
"""
import collections
import re
import sys

HEADER = re.compile(r"^========= (\S.*)$")
FRAME = re.compile(r"^=========\s+Host Frame:\s*(\S+)?.* in (\S+)$")


def reports(path):
    """(summary found, [(header, frames)]) of one log."""
    blocks, current, summary = [], None, False
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("========= ERROR SUMMARY"):
                summary = True
                continue
            frame = FRAME.match(line)
            if frame and current is not None:
                current[1].append(frame.group(1) or frame.group(2))
                continue
            header = HEADER.match(line)
            if header and not header.group(1).startswith(("COMPUTE-SANITIZER", "Saved host backtrace", "LEAK SUMMARY")):
                current = (header.group(1), [])
                blocks.append(current)
    return summary, blocks


def key(header, frames):
    """What identifies a report across processes: its text without addresses, and the library
    entry point it came through (the first cudnn/cublas/cuda API name among the frames)."""
    text = re.sub(r"0x[0-9a-f]+", "ADDR", header)
    entry = next((f for f in frames if re.match(r"^(cudnn|cublas|cuda|nvjpeg)\w+$", f or "")), "")
    return text, entry


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    control_summary, control = reports(sys.argv[1])
    if not control_summary:
        print(f"memcheck: the control ({sys.argv[1]}) did not finish")
        return 1
    library = collections.Counter(key(h, fr) for h, fr in control)
    print(f"memcheck: control (cudnnCreate + cudnnDestroy alone): {len(control)} reports, all the libraries' own")
    status = 0
    for path in sys.argv[2:]:
        summary, blocks = reports(path)
        left = library.copy()
        own, findings = 0, []
        for header, frames in blocks:
            k = key(header, frames)
            if left[k] > 0:
                left[k] -= 1
                own += 1
            else:
                findings.append(header)
        verdict = "ok" if summary and not findings else "FOUND"
        print(f"memcheck: {path}: {len(blocks)} reports, {own} also in the control (library state), "
              f"{len(findings)} kiln's: {verdict}" + ("" if summary else " (no ERROR SUMMARY: did not finish)"))
        for h in findings[:20]:
            print(f"  {h}")
        if verdict != "ok":
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
