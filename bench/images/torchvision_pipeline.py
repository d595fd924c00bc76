#!/usr/bin/python3
"""The torchvision reference of bench_image_pipeline: ImageFolder + DataLoader (num_workers=0, one torch thread) with
the same training transforms (RandomResizedCrop(scale 0.08..1), RandomHorizontalFlip, ToTensor, Normalize) over the
same folder, in images/s. Run with Debian's /usr/bin/python3 (python3-torchvision, python3-pil).

    torchvision_pipeline.py --info                      # what it runs on: torch config, PIL, libjpeg-turbo, CPU
    torchvision_pipeline.py --dir DIR --size H W [--eval] [--passes N]
"""
import argparse
import os
import sys
import platform
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import peer_malloc  # noqa: E402  (bench/peer_malloc.py: before torch, it may re-execute this script)

peer_malloc.ensure()


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--info", action="store_true")
    ap.add_argument("--dir")
    ap.add_argument("--size", nargs=2, type=int)
    ap.add_argument("--eval", action="store_true", help="Resize((H, W)) instead of the training augmentation")
    ap.add_argument("--passes", type=int, default=1)
    args = ap.parse_args()

    import torch
    import torchvision
    import PIL
    from PIL import features
    from torchvision import datasets, transforms

    torch.set_num_threads(1)
    if args.info:
        print(torch.__config__.show())
        print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, threads {torch.get_num_threads()}")
        print(f"PIL {PIL.__version__}, libjpeg-turbo: {features.check_feature('libjpeg_turbo')}, "
              f"jpeg version {features.version('jpg')}, SIMD resize: {'post' in PIL.__version__}")
        print(f"CPU: {cpu_model()}; malloc: {peer_malloc.describe()}")
        if not args.dir:
            return
    if not args.dir or not args.size:
        ap.error("--dir DIR --size H W are required")

    h, w = args.size
    normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    if args.eval:
        tf = transforms.Compose([transforms.Resize((h, w)), transforms.ToTensor(), normalize])
    else:
        tf = transforms.Compose([transforms.RandomResizedCrop((h, w), scale=(0.08, 1.0)),
                                 transforms.RandomHorizontalFlip(), transforms.ToTensor(), normalize])
    dataset = datasets.ImageFolder(args.dir, transform=tf)
    loader = torch.utils.data.DataLoader(dataset, batch_size=32, shuffle=False, num_workers=0)
    torch.manual_seed(1)
    checksum = 0.0
    done = 0
    start = time.perf_counter()
    cpu_start = time.process_time()
    for _ in range(args.passes):
        for images, _labels in loader:
            done += images.shape[0]
            checksum += float(images[0, 0, h // 2, w // 2])
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start  # on a shared machine the wall clock also counts others' time
    print(f"torchvision{' eval' if args.eval else ''}: {done} images of {args.dir} to 3x{h}x{w} in {seconds:.3f} s "
          f"({cpu_seconds:.3f} CPU s): images/s {done / seconds:.1f}, per CPU-second {done / cpu_seconds:.1f} "
          f"(checksum {checksum:.3f})")


if __name__ == "__main__":
    main()
