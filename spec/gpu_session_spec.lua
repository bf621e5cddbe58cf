-- scripts/gpu-session (README "On the GPU machine"): its usage errors, and
-- that it stops with the reason on a machine without a usable GPU (where it
-- runs, the steps are the specs and benchmarks they name).
local fh = require "fhelium"
local cli = require "spec.support.cli"
local H = require "spec.helpers"

local SCRIPT = cli.quote(cli.root .. "/scripts/gpu-session")

describe("scripts/gpu-session", function()
  it("rejects an unknown step with status 2 before building anything", function()
    local r = cli.sh(SCRIPT .. " test,benchmarks")
    assert.equal(2, r.code, r.stdout .. r.stderr)
    assert.truthy(r.stderr:find("gpu-session: unknown step 'benchmarks' (expected test, check, bench, ab, soak, sweep or "
      .. "multi)", 1, true), r.stderr)
  end)

  it("refuses the ab step without settings, with status 2 before building anything", function()
    local r = cli.sh(SCRIPT .. " test,ab", { env = { FHELIUM_SESSION_AB = "" } })
    assert.equal(2, r.code, r.stdout .. r.stderr)
    assert.truthy(r.stderr:find("gpu-session: step ab needs FHELIUM_SESSION_AB, two or more kernel-switch settings", 1,
      true), r.stderr)
  end)

  if fh.cuda.is_available() then
    H.skip_it("stops with the reason when no CUDA device is usable", "a CUDA device is present")
  else
    it("stops with the reason when no CUDA device is usable", function()
      local logs = os.tmpname()
      os.remove(logs)
      finally(function() cli.sh("rm -rf " .. cli.quote(logs)) end)
      -- this build (no new build folder, no reconfiguration)
      local build = cli.bin:match("^(.*)/[^/]+$")
      local r = cli.sh(SCRIPT .. " test", { env = { FHELIUM_SESSION_LOGS = logs, FHELIUM_BUILD = build,
        FHELIUM_CMAKE_ARGS = "" } })
      assert.equal(1, r.code, r.stdout .. r.stderr)
      assert.truthy(r.stderr:find("gpu-session: no usable CUDA device: " .. fh.cuda.unavailable_reason(), 1, true),
        r.stderr)
    end)
  end
end)
