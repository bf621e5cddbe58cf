-- scripts/export-build and FHELIUM_PREBUILT (README "On the GPU machine"): a
-- build's outputs copied into a folder that another machine runs without
-- compiling; scripts/build then checks the outputs instead of building.
local cli = require "spec.support.cli"

local EXPORT = cli.quote(cli.root .. "/scripts/export-build")
local BUILD = cli.quote(cli.root .. "/scripts/build")
-- this build (no new build folder, no reconfiguration)
local this_build = cli.bin:match("^(.*)/[^/]+$")
local function env(extra)
  local e = { FHELIUM_BUILD = this_build, FHELIUM_CMAKE_ARGS = "", FHELIUM_PREBUILT = false }
  for k, v in pairs(extra or {}) do e[k] = v end
  return e
end
local function temp_dir()
  local d = os.tmpname()
  os.remove(d)
  finally(function() cli.sh("rm -rf " .. cli.quote(d)) end)
  return d
end
local function exists(path) return cli.sh("test -f " .. cli.quote(path)).code == 0 end

describe("scripts/export-build", function()
  it("copies the executable, the Lua module and the baselines into DIR, and the copy runs", function()
    local dir = temp_dir()
    local r = cli.sh(EXPORT .. " " .. cli.quote(dir), { env = env() })
    assert.equal(0, r.code, r.stdout .. r.stderr)
    assert.truthy(r.stdout:find("export-build: fhelium lua/fhelium/core.so", 1, true), r.stdout)
    assert.truthy(r.stdout:find("-> " .. dir, 1, true), r.stdout)
    assert.is_true(exists(dir .. "/fhelium"))
    assert.is_true(exists(dir .. "/lua/fhelium/core.so"))
    assert.is_false(exists(dir .. "/CMakeCache.txt"))
    -- the copied executable loads the module and computes
    local run = cli.sh(cli.quote(dir .. "/fhelium") .. " -e " ..
      cli.quote("local fh = require 'fhelium' local t = fh.tensor({ 1, 2, 3 }) io.write((t + t):tolist()[3])"), { env = env() })
    assert.equal(0, run.code, run.stdout .. run.stderr)
    assert.equal("6", run.stdout)
    -- FHELIUM_PREBUILT=1: scripts/build takes the folder as it is (nothing configured)
    local b = cli.sh(BUILD, { env = env { FHELIUM_BUILD = dir, FHELIUM_PREBUILT = "1" } })
    assert.equal(0, b.code, b.stdout .. b.stderr)
    assert.is_false(exists(dir .. "/CMakeCache.txt"))
  end)

  it("leaves the baselines out with --no-baselines", function()
    local dir = temp_dir()
    local r = cli.sh(EXPORT .. " --no-baselines " .. cli.quote(dir), { env = env() })
    assert.equal(0, r.code, r.stdout .. r.stderr)
    assert.truthy(r.stdout:find("export-build: fhelium lua/fhelium/core.so -> " .. dir, 1, true), r.stdout)
    assert.is_true(exists(dir .. "/fhelium"))
    assert.is_false(exists(dir .. "/fhelium_bench_baseline"))
  end)

  it("takes exactly one DIR, after --no-baselines if any (status 2 and the usage otherwise)", function()
    local r = cli.sh(EXPORT, { env = env() })
    assert.equal(2, r.code, r.stdout .. r.stderr)
    assert.truthy(r.stderr:find("usage: scripts/export-build [--no-baselines] DIR", 1, true), r.stderr)
    for _, args in ipairs { " a b", " --no-baselines", " --baselines x", " --no-baselines a b" } do
      r = cli.sh(EXPORT .. args, { env = env() })
      assert.equal(2, r.code, args .. ": " .. r.stdout .. r.stderr)
      assert.truthy(r.stderr:find("usage: scripts/export-build [--no-baselines] DIR", 1, true), r.stderr)
    end
  end)

  it("refuses to export from a carried build, and into the build folder itself", function()
    local dir = temp_dir()
    local r = cli.sh(EXPORT .. " " .. cli.quote(dir), { env = env { FHELIUM_PREBUILT = "1" } })
    assert.equal(2, r.code, r.stdout .. r.stderr)
    assert.truthy(r.stderr:find("export-build: FHELIUM_PREBUILT=1 names a carried build; export from a build folder "
      .. "(unset it)", 1, true), r.stderr)
    r = cli.sh(EXPORT .. " " .. cli.quote(this_build), { env = env() })
    assert.equal(2, r.code, r.stdout .. r.stderr)
    assert.truthy(r.stderr:find("export-build: DIR is the build folder itself", 1, true), r.stderr)
  end)
end)

describe("scripts/build with FHELIUM_PREBUILT=1", function()
  it("fails naming the missing output when the folder lacks the module or the executable", function()
    local dir = temp_dir()
    assert.equal(0, cli.sh("mkdir -p " .. cli.quote(dir .. "/lua/fhelium")).code)
    local r = cli.sh(BUILD, { env = env { FHELIUM_BUILD = dir, FHELIUM_PREBUILT = "1" } })
    assert.equal(1, r.code, r.stdout .. r.stderr)
    assert.truthy(r.stderr:find("build: FHELIUM_PREBUILT=1 but " .. dir .. " has no lua/fhelium/core.so (make the "
      .. "folder with scripts/export-build on a machine that builds)", 1, true), r.stderr)
    assert.equal(0, cli.sh("touch " .. cli.quote(dir .. "/lua/fhelium/core.so")).code)
    r = cli.sh(BUILD, { env = env { FHELIUM_BUILD = dir, FHELIUM_PREBUILT = "1" } })
    assert.equal(1, r.code, r.stdout .. r.stderr)
    assert.truthy(r.stderr:find("build: FHELIUM_PREBUILT=1 but " .. dir .. " has no fhelium (", 1, true), r.stderr)
    assert.is_false(exists(dir .. "/CMakeCache.txt"))
  end)
end)
