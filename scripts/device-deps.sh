#!/usr/bin/env bash
# Run HERE, before lending a device machine the tree: packs what that machine lacks into build-deps/ (git-ignored, so
# the device run must carry it: carry ["build-deps"]): Catch2 v2's CMake package (the device image has Catch2 v3
# only, so without it the gpu tests are not built) and the Fashion-MNIST IDX files (the GPU benchmark falls back to
# synthetic data without them). scripts/device-check.sh finds both there by itself. About 33 MB.
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
fm="${DATA_DIR:-/usr/share/datasets/fashion-mnist}"
if [ -f "$fm/train-images-idx3-ubyte.gz" ]; then
  mkdir -p "$deps/fashion-mnist"
  cp "$fm"/*-ubyte.gz "$deps/fashion-mnist/"
  echo "Fashion-MNIST -> $deps/fashion-mnist"
else
  echo "device-deps.sh: no Fashion-MNIST in $fm: the GPU benchmark will use synthetic data" >&2
fi
du -sh "$deps"
