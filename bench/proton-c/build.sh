#!/usr/bin/env bash
# Builds tandem-loadgen into bench/proton-c/.build/ against Debian's libqpid-proton11-dev
# (flags from pkg-config). Rebuilds only when a source is newer than the binary.
# Prints the binary's path.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/.build/tandem-loadgen"
if ! pkg-config --exists libqpid-proton; then
  echo "build.sh: libqpid-proton not found by pkg-config; install libqpid-proton11-dev and pkg-config (test/setup.sh does)" >&2
  exit 1
fi
sources=("$here"/*.c)
if [ -x "$out" ]; then
  stale=0
  for f in "${sources[@]}" "$here"/*.h "$here/build.sh"; do [ "$f" -nt "$out" ] && stale=1; done
  if [ "$stale" = 0 ]; then echo "$out"; exit 0; fi
fi
mkdir -p "$here/.build"
# shellcheck disable=SC2046 # pkg-config's flags are meant to split
"${CC:-cc}" -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror \
  $(pkg-config --cflags libqpid-proton) -o "$out.tmp" "${sources[@]}" \
  $(pkg-config --libs libqpid-proton) -lpthread
mv "$out.tmp" "$out"
echo "$out"
