#!/usr/bin/env bash
# Run HERE, before lending a device machine the tree: packs what that machine lacks into build-deps/ (git-ignored, so
# the device run must carry it: carry ["build-deps"]): Catch2 v2's CMake package (the device image has Catch2 v3
# only, so without it the gpu tests are not built), the Fashion-MNIST IDX files (the GPU benchmark falls back to
# synthetic data without them), TurboJPEG and oneDNN (below). scripts/device-check.sh finds them there by itself,
# using each only where the system has none. About 40 MB.
# Usage: scripts/device-deps.sh        (Debian: catch2 installed; Fashion-MNIST in /usr/share/datasets/fashion-mnist)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
deps="$root/build-deps"
mkdir -p "$deps"
if [ -f /usr/lib/cmake/Catch2/Catch2Config.cmake ] && [ -f /usr/include/catch2/catch.hpp ]; then
  c="$deps/catch2-v2"  # the package is relocatable: its prefix is three levels above Catch2Config.cmake
  rm -rf "$c"
  mkdir -p "$c/lib/cmake" "$c/include"
  cp -r /usr/lib/cmake/Catch2 "$c/lib/cmake/"
  cp -r /usr/include/catch2 "$c/include/"
  cp /usr/lib/libCatch2WithMain.a "$c/lib/"
  echo "Catch2 v2 -> $c"
else
  echo "device-deps.sh: no Catch2 v2 here (apt-get install catch2): the device's gpu tests will not be built" >&2
fi
# libjpeg-turbo's TurboJPEG API: the device image has libjpeg but not turbojpeg.h, and configure requires it (image
# folders, issue 17). The header and the shared library (it needs only libc, GLIBC_2.14) go along.
if [ -f /usr/include/turbojpeg.h ] && [ -e /usr/lib/x86_64-linux-gnu/libturbojpeg.so.0 ]; then
  t="$deps/turbojpeg"
  rm -rf "$t"
  mkdir -p "$t/include" "$t/lib"
  cp /usr/include/turbojpeg.h "$t/include/"
  cp -L /usr/lib/x86_64-linux-gnu/libturbojpeg.so.0 "$t/lib/libturbojpeg.so.0"
  cp "$t/lib/libturbojpeg.so.0" "$t/lib/libturbojpeg.so"  # a copy: links may not travel
  echo "TurboJPEG -> $t"
else
  echo "device-deps.sh: no TurboJPEG here (apt-get install libturbojpeg0-dev): the device configure will fail" >&2
fi
# oneDNN 2.6 (Debian libdnnl-dev), which the device image lacks: without it the CPU convolutions there are im2col only,
# and the cpuref stage cannot measure train.cpu_conv's choice on Intel (issue 17). Packed in Debian's layout (the CMake
# package finds its prefix four levels up) with OpenCL's loader and headers, which the package requires, as one
# tar.xz (~7 MB; the library alone is 40 MB). device-check.sh unpacks it where the system has no oneDNN.
d=/usr/lib/x86_64-linux-gnu
if [ -f "$d/cmake/dnnl/dnnl-config.cmake" ] && [ -e "$d/libdnnl.so.2" ] && [ -f /usr/include/CL/cl.h ] \
   && [ -e "$d/libOpenCL.so.1" ]; then
  tmp="$(mktemp -d)"
  o="$tmp/onednn"
  mkdir -p "$o/include" "$o/lib/x86_64-linux-gnu/cmake"
  cp -r /usr/include/oneapi /usr/include/CL "$o/include/"
  cp /usr/include/dnnl*.h /usr/include/dnnl*.hpp "$o/include/"
  cp -r "$d/cmake/dnnl" "$o/lib/x86_64-linux-gnu/cmake/"
  real="$(readlink -f "$d/libdnnl.so.2")"
  cp "$real" "$o/lib/x86_64-linux-gnu/$(basename "$real")"
  for n in libdnnl.so.2 libdnnl.so; do ln -s "$(basename "$real")" "$o/lib/x86_64-linux-gnu/$n"; done
  cp -L "$d/libOpenCL.so.1" "$o/lib/x86_64-linux-gnu/libOpenCL.so.1"
  ln -s libOpenCL.so.1 "$o/lib/x86_64-linux-gnu/libOpenCL.so"
  tar -C "$tmp" -cJf "$deps/onednn.tar.xz" onednn  # links inside the archive travel as its bytes
  rm -rf "$tmp"
  echo "oneDNN -> $deps/onednn.tar.xz"
else
  echo "device-deps.sh: no oneDNN here (apt-get install libdnnl-dev opencl-c-headers): the device builds im2col only" >&2
fi
fm="${DATA_DIR:-/usr/share/datasets/fashion-mnist}"
if [ -f "$fm/train-images-idx3-ubyte.gz" ]; then
  mkdir -p "$deps/fashion-mnist"
  cp "$fm"/*-ubyte.gz "$deps/fashion-mnist/"
  echo "Fashion-MNIST -> $deps/fashion-mnist"
else
  echo "device-deps.sh: no Fashion-MNIST in $fm: the GPU benchmark will use synthetic data" >&2
fi
du -sh "$deps"
