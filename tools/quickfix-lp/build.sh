#!/bin/sh
# Builds quickfix-lp against Debian's QuickFIX (apt-get install -y
# libquickfix-dev). Usage: build.sh OUTPUT_PATH
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-"$here/../../target/quickfix-lp/quickfix-lp"}
mkdir -p "$(dirname "$out")"
# QuickFIX 1.15.1's headers use dynamic exception specifications: C++14.
${CXX:-g++} -std=c++14 -O1 -Wall -Wno-deprecated -Wno-deprecated-declarations \
  -o "$out.tmp.$$" "$here/lp.cpp" -lquickfix -lpthread
mv -f "$out.tmp.$$" "$out"
