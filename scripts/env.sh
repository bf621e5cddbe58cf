# shellcheck shell=bash
# Sourced by the scripts (and by hand: `source scripts/env.sh`): points Lua
# at the source tree and the built module, and puts the built `fhelium` on
# PATH. The build directory is $FHELIUM_BUILD (default: build), relative to
# the project root unless absolute. Prepends to LUA_PATH/LUA_CPATH, never
# replaces them (busted, and the GPU machine's kit, need their own entries).
_fh_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
_fh_build=${FHELIUM_BUILD:-build}
case "$_fh_build" in /*) ;; *) _fh_build="$_fh_root/$_fh_build" ;; esac
export FHELIUM_LUA_DIR="$_fh_root/lua"
export LUA_PATH="$_fh_root/lua/?.lua;$_fh_root/lua/?/init.lua;$_fh_root/?.lua;${LUA_PATH:-;}"
export LUA_CPATH="$_fh_build/lua/?.so;${LUA_CPATH:-;}"
export PATH="$_fh_build:$PATH"
export FHELIUM_BIN="$_fh_build/fhelium"
unset _fh_root _fh_build
