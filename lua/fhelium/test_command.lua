-- `fhelium test [--gpu] [--verbose-skips] [busted args...]`: busted, run
-- inside the `fhelium` executable, so that `require "fhelium"` in the specs
-- is the build this executable belongs to (no LUA_PATH/LUA_CPATH by hand).
-- The output handler is fhelium.test_output (skips grouped by reason, last
-- line "N passed, N failed, N skipped") unless -o/--output or a .busted
-- file names another. Exit status: 0 when every spec passed, 1 otherwise.
--   --gpu            specs that need a GPU fail instead of being skipped
--                    when none is usable (testing.require_gpu; the same as
--                    FHELIUM_REQUIRE_GPU=1), and the run fails at once when
--                    no CUDA device is usable
--   --verbose-skips  list every skipped spec with its file and line (the
--                    same as FHELIUM_TEST_VERBOSE=1)
-- fhelium and fhelium.testing are loaded before busted starts, so that they
-- (and testing.engine's cache) survive busted's per-file insulation.
local M = {}

local usage = [[
usage: fhelium test [--gpu] [--verbose-skips] [busted options] [ROOT...]
  runs busted under this fhelium build (ROOT: spec files or folders, default spec)
  --gpu            fail specs that need a GPU when none is usable, instead of skipping them
  --verbose-skips  list every skipped spec with its file and line
busted's options follow.
]]

-- the last line's contract holds for a run that cannot start, too
local function fail(msg)
  io.stderr:write("fhelium test: ", msg, "\n")
  io.stdout:write("\n0 passed, 1 failed, 0 skipped\n")
  io.stdout:flush()
  return 1
end

local function is_file(path)
  local f = io.open(path, "r")
  if f then f:close() end
  return f ~= nil
end

-- busted installed under a prefix that is not on package.path (luarocks
-- --local, a kit unpacked elsewhere): its command is PREFIX/bin/busted and
-- its modules are under PREFIX/share/lua/5.1 and PREFIX/lib/.../lua/5.1.
-- Adds those to package.path and package.cpath and returns PREFIX, or nil.
local function busted_prefix()
  for dir in (os.getenv("PATH") or ""):gmatch("[^:]+") do
    local prefix = dir:match("^(.*)/bin/?$")
    if prefix and is_file(dir .. "/busted") and is_file(prefix .. "/share/lua/5.1/busted/runner.lua") then
      local share = prefix .. "/share/lua/5.1"
      package.path = ("%s/?.lua;%s/?/init.lua;%s"):format(share, share, package.path)
      for _, lib in ipairs { prefix .. "/lib/x86_64-linux-gnu/lua/5.1", prefix .. "/lib/aarch64-linux-gnu/lua/5.1",
        prefix .. "/lib/lua/5.1" } do
        package.cpath = ("%s/?.so;%s"):format(lib, package.cpath)
      end
      return prefix
    end
  end
  return nil
end

--- main(args) -> exit status. args: the words after `fhelium test`.
function M.main(args)
  local rest, gpu, verbose, help = {}, false, false, false
  for _, a in ipairs(args) do
    if a == "--gpu" then
      gpu = true
    elseif a == "--verbose-skips" then
      verbose = true
    else
      if a == "-h" or a == "--help" then help = true end
      rest[#rest + 1] = a
    end
  end
  local have_runner, runner = pcall(require, "busted.runner")
  if not have_runner then
    local prefix = busted_prefix()
    if prefix then
      have_runner, runner = pcall(require, "busted.runner")
      if not have_runner then runner = ("%s\n(also tried %s/share/lua/5.1, beside the busted command on PATH)"):format(
        tostring(runner), prefix) end
    end
  end
  if not have_runner then
    return fail("busted is not installed or not on package.path (Debian: apt-get install lua-busted):\n" ..
      tostring(runner))
  end
  if help then
    -- busted's own --help is an error (exit 1); here it is the answer
    local cli = require("busted.modules.cli")({ standalone = false, output = "fhelium.test_output" })
    cli:set_name("fhelium test")
    local _, text = cli:parse({ "--help" })
    text = tostring(text):gsub("^fhelium test: error: ", ""):gsub(";%s*re%-run with %-%-help for usage%.%s*$", "")
    io.stdout:write(usage, text, "\n")
    return 0
  end
  local fh = require "fhelium"
  if gpu and not fh.cuda.is_available() then
    return fail("--gpu: no usable CUDA device: " .. fh.cuda.unavailable_reason())
  end
  local testing = require "fhelium.testing"
  testing.require_gpu = testing.require_gpu or gpu
  require("fhelium.test_output").verbose = verbose
  -- busted reads the global `arg`
  local argv = { [0] = "fhelium test" }
  for i, a in ipairs(rest) do argv[i] = a end
  _G.arg = argv
  -- busted names itself after the chunk that calls its runner: "fhelium
  -- test". A run with failures ends in error() (busted's exit for a runner
  -- that is not the main chunk), one without returns.
  local chunk = assert(loadstring(
    "local runner = ...\nrunner({ standalone = false, output = 'fhelium.test_output' })\nreturn true",
    "@fhelium test"))
  local ok, err = pcall(chunk, runner)
  io.stdout:flush()
  if ok then return 0 end
  if err ~= nil then io.stderr:write("fhelium test: ", tostring(err), "\n") end
  return 1
end

return M
