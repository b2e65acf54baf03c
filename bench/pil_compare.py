#!/usr/bin/env python3
"""Compare kiln's ImageNet-style crops with torchvision's, pixel for pixel.

Needs PIL (Pillow), torchvision and numpy; kiln's output comes in as a file.

Usage:
  python3 bench/pil_compare.py --images DIR --kiln-dump FILE [--boxes BOXES.jsonl]
                               [--size 224] [--resize 256] [--write-reference OUT.raw]

  --images DIR       the image folder; "file" entries below are relative to it.
  --boxes FILE       JSON lines, one sample each, in the order of the kiln dump:
                       {"file": "n01440764/x.JPEG", "box": [x, y, w, h], "size": 224, "flip": 0}
                         -> RandomResizedCrop with that box: torchvision.transforms.functional
                            .resized_crop(img, y, x, h, w, [size, size], BILINEAR, antialias=True),
                            then hflip when flip is 1.
                       {"file": "...", "box": null, "resize": 256, "size": 224, "flip": 0}
                         -> evaluation: Resize(resize) + CenterCrop(size) (then hflip if flip).
                     "size" defaults to --size, "resize" to --resize, "flip" to 0.
                     Without --boxes: the evaluation transform of every image under DIR
                     (recursively, sorted by path), no flip.
  --kiln-dump FILE   kiln's samples, uint8 HWC (size x size x 3 each), concatenated in the
                     same order, nothing else in the file.
  --write-reference  also write torchvision's samples in the same raw layout.

Images are read as torchvision's ImageFolder does: PIL's Image.open(path).convert("RGB"), full
scale (kiln may decode JPEGs at 1/2, 1/4, 1/8 scale; such samples differ more, by design).

Prints one JSON object: the Pillow and torchvision versions, per sample the max and mean absolute
difference and the fraction of values that differ, then the overall mean/max absolute difference
and the fraction of values differing.

Pillow's version matters: up to 12.x it always resamples horizontally first; 13.x resamples
vertically first when the height shrinks by more than twice as many pixels as the width. kiln's
resize_box_bilinear takes the order as a parameter (PassOrder; pillow13_pass_order gives 13.x's
choice): dump with the order of the Pillow installed here for a bit-exact comparison, else expect
differences of 1 level in some samples.
"""
import argparse
import json
import os
import sys

import numpy as np
import PIL
from PIL import Image
import torchvision
import torchvision.transforms as T
import torchvision.transforms.functional as F
from torchvision.transforms import InterpolationMode

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def load_rgb(path):
    with open(path, "rb") as f:
        img = Image.open(f)
        return img.convert("RGB")


def samples_from_args(args):
    if args.boxes:
        samples = []
        with open(args.boxes) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    sys.exit(f"{args.boxes}:{n}: not JSON ({e})")
                if "file" not in rec:
                    sys.exit(f"{args.boxes}:{n}: no \"file\"")
                samples.append(rec)
        return samples
    files = []
    for root, _, names in os.walk(args.images):
        for name in names:
            if name.lower().endswith(IMAGE_EXTENSIONS):
                files.append(os.path.relpath(os.path.join(root, name), args.images))
    return [{"file": f, "box": None} for f in sorted(files)]


def torchvision_sample(img, rec, default_size, default_resize):
    size = int(rec.get("size", default_size))
    box = rec.get("box")
    if box is not None:
        x, y, w, h = (int(v) for v in box)
        out = F.resized_crop(img, y, x, h, w, [size, size], interpolation=InterpolationMode.BILINEAR,
                             antialias=True)
        mode = "train"
    else:
        resize = int(rec.get("resize", default_resize))
        out = T.Compose([T.Resize(resize, interpolation=InterpolationMode.BILINEAR, antialias=True),
                         T.CenterCrop(size)])(img)
        mode = "eval"
    if int(rec.get("flip", 0)):
        out = F.hflip(out)
    arr = np.asarray(out, dtype=np.uint8)
    if arr.shape != (size, size, 3):
        sys.exit(f"{rec['file']}: torchvision gave shape {arr.shape}, expected {(size, size, 3)}")
    return arr, mode, size


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", required=True)
    ap.add_argument("--kiln-dump", required=True)
    ap.add_argument("--boxes")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--resize", type=int, default=256)
    ap.add_argument("--write-reference")
    args = ap.parse_args()

    samples = samples_from_args(args)
    if not samples:
        sys.exit("no samples (empty --boxes file or no images under --images)")
    dump = np.fromfile(args.kiln_dump, dtype=np.uint8)
    ref_out = open(args.write_reference, "wb") if args.write_reference else None

    offset = 0
    per_file = []
    total_abs = 0
    total_values = 0
    total_differ = 0
    overall_max = 0
    for rec in samples:
        img = load_rgb(os.path.join(args.images, rec["file"]))
        want, mode, size = torchvision_sample(img, rec, args.size, args.resize)
        if ref_out:
            ref_out.write(want.tobytes())
        n = size * size * 3
        if offset + n > dump.size:
            sys.exit(f"{args.kiln_dump}: {dump.size} bytes, too short for sample {len(per_file)} "
                     f"({rec['file']}, needs bytes [{offset}, {offset + n}))")
        got = dump[offset:offset + n].reshape(size, size, 3)
        offset += n
        diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
        per_file.append({
            "file": rec["file"],
            "mode": mode,
            "box": rec.get("box"),
            "flip": int(rec.get("flip", 0)),
            "max_abs_diff": int(diff.max()),
            "mean_abs_diff": float(diff.mean()),
            "frac_differ": float(np.count_nonzero(diff) / diff.size),
        })
        total_abs += int(diff.sum())
        total_values += diff.size
        total_differ += int(np.count_nonzero(diff))
        overall_max = max(overall_max, int(diff.max()))
    if ref_out:
        ref_out.close()
    if offset != dump.size:
        print(f"warning: {args.kiln_dump} has {dump.size - offset} bytes after the last sample", file=sys.stderr)

    print(json.dumps({
        "pillow_version": PIL.__version__,
        "torchvision_version": torchvision.__version__,
        "samples": len(per_file),
        "per_file": per_file,
        "overall_mean_abs_diff": total_abs / total_values,
        "overall_max_abs_diff": overall_max,
        "overall_frac_differ": total_differ / total_values,
    }, indent=1))


if __name__ == "__main__":
    main()
