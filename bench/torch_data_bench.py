"""torchvision's data loading on an image folder, the baseline of `kiln data-bench`.

What an expert PyTorch user runs for ImageNet-style training: torchvision's ImageFolder (PIL
decode, `convert('RGB')`), RandomResizedCrop(size) + RandomHorizontalFlip + ToTensor + Normalize
(ImageNet's mean/std), a DataLoader with workers = the cores, pin_memory, persistent workers, and
each batch copied to the GPU (non_blocking). Modes:
  pil      the above (torchvision's default path)
  tv-io    torchvision.io.decode_jpeg on the CPU + transforms.v2 on uint8 tensors
  gpu      batched torchvision.io.decode_jpeg(device="cuda") (nvJPEG) + v2 crops on the GPU,
           files read by DataLoader workers
Images/s over --batches batches after --warmup batches, one JSON line per mode on stdout.

  python3 bench/torch_data_bench.py --data data/photos/train --modes pil,tv-io,gpu --workers 16
"""
import argparse
import json
import os
import time

import torch
import torchvision
from torchvision import datasets, transforms
from torchvision.transforms import v2

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def pil_loader(args):
    tf = transforms.Compose([
        transforms.RandomResizedCrop(args.size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(MEAN, STD),
    ])
    ds = datasets.ImageFolder(args.data, transform=tf)
    return ds, None


class RawFiles(torch.utils.data.Dataset):
    """The folder's files as raw bytes (for torchvision.io's decoders)."""

    def __init__(self, root, transform=None):
        self.inner = datasets.ImageFolder(root)
        self.transform = transform

    def __len__(self):
        return len(self.inner.samples)

    def __getitem__(self, i):
        path, label = self.inner.samples[i]
        data = torchvision.io.read_file(path)
        if self.transform is None:
            return data, label
        img = torchvision.io.decode_image(data, mode=torchvision.io.ImageReadMode.RGB)
        return self.transform(img), label


def tvio_loader(args):
    tf = v2.Compose([
        v2.RandomResizedCrop(args.size, antialias=True),
        v2.RandomHorizontalFlip(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
    ])
    return RawFiles(args.data, tf), None


def jpeg_components(data):
    """The component count of a JPEG's frame header (SOF0-SOF15 but DHT/JPG/DAC), 0 if not found."""
    b = bytes(data[:65536].numpy()) if hasattr(data, "numpy") else bytes(data[:65536])
    i = 2
    while i + 9 < len(b):
        if b[i] != 0xFF:
            return 0
        marker = b[i + 1]
        if marker == 0xFF:
            i += 1
            continue
        length = (b[i + 2] << 8) | b[i + 3]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            return b[i + 9]
        i += 2 + length
    return 0


def gpu_loader(args):
    crop = v2.Compose([v2.RandomResizedCrop(args.size, antialias=True), v2.RandomHorizontalFlip()])
    mean = torch.tensor(MEAN, device="cuda").view(1, 3, 1, 1)
    std = torch.tensor(STD, device="cuda").view(1, 3, 1, 1)

    rgb = torchvision.io.ImageReadMode.RGB

    def on_gpu(batch):
        files, labels = batch
        # nvJPEG cannot convert CMYK/YCCK files: those few are decoded on the CPU (as torchvision's
        # CPU decoder converts them) and moved up; the rest go to the GPU in one batched call.
        four = [i for i, f in enumerate(files) if jpeg_components(f) == 4]
        rest = sorted(set(range(len(files))) - set(four))
        images = [None] * len(files)
        for i, img in zip(rest, torchvision.io.decode_jpeg([files[i] for i in rest], device="cuda", mode=rgb)):
            images[i] = img
        for i in four:
            images[i] = torchvision.io.decode_jpeg(files[i], mode=rgb).cuda(non_blocking=True)
        out = torch.stack([crop(img) for img in images]).float().div_(255)
        return (out - mean) / std, labels.cuda(non_blocking=True)

    return RawFiles(args.data), on_gpu


def collate_files(batch):
    return [b[0] for b in batch], torch.tensor([b[1] for b in batch])


def run(mode, args):
    make = {"pil": pil_loader, "tv-io": tvio_loader, "gpu": gpu_loader}[mode]
    ds, gpu_step = make(args)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=args.batch, shuffle=True, num_workers=args.workers, pin_memory=gpu_step is None,
        persistent_workers=True, drop_last=True, prefetch_factor=4,
        collate_fn=collate_files if gpu_step is not None else None)
    it = iter(loader)
    done = 0

    def one():
        nonlocal it
        try:
            batch = next(it)
        except StopIteration:
            it = iter(loader)
            batch = next(it)
        if gpu_step is not None:
            images, labels = gpu_step(batch)
        else:
            images = batch[0].cuda(non_blocking=True).contiguous(memory_format=torch.channels_last)
            labels = batch[1].cuda(non_blocking=True)
        return images.shape[0]

    for _ in range(args.warmup):
        one()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.batches):
        done += one()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(json.dumps({"framework": "torchvision", "mode": mode, "data": args.data, "batch": args.batch,
                      "workers": args.workers, "image_size": args.size, "images": done, "seconds": seconds,
                      "images_per_second": done / seconds, "torch": torch.__version__,
                      "torchvision": torchvision.__version__}), flush=True)


def main():
    # Many small tensors (the raw files) go through the workers' queues: share them through files,
    # not one file descriptor each, which runs out (EBADF) with 16 workers.
    torch.multiprocessing.set_sharing_strategy("file_system")
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True, help="an ImageFolder split (class subfolders)")
    p.add_argument("--modes", default="pil")
    p.add_argument("--workers", type=int, default=os.cpu_count())
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()
    for mode in args.modes.split(","):
        try:
            run(mode, args)
        except Exception as e:  # a mode that cannot read these files is reported, the others still run
            print(json.dumps({"framework": "torchvision", "mode": mode, "error": repr(e)[:500]}), flush=True)


if __name__ == "__main__":
    main()
