-- The skip report of fhelium.test_output (lua/fhelium/test_output.lua): every skipped spec is
-- named by its own spec file and line (not spec/helpers.lua), grouped by
-- reason with a count, listed one by one with FHELIUM_TEST_VERBOSE=1, and
-- the last line stays "N passed, N failed, N skipped".
local cli = require "spec.support.cli"

-- busted on the fixture, under LuaJIT as scripts/test runs it
local function run_fixture(env)
  local p = io.popen("command -v busted")
  local bin = p:read("*l")
  p:close()
  assert(bin, "busted not found")
  local f = io.open(bin)
  local first = f:read("*l")
  f:close()
  local runner = first:find("lua") and ("luajit " .. cli.quote(bin)) or cli.quote(bin)
  -- a nested busted loads fhelium like this one: under the sanitizers it
  -- needs the same preloaded runtime (cli.sh drops LD_PRELOAD otherwise)
  env.LD_PRELOAD = os.getenv("LD_PRELOAD") or false
  return cli.sh(runner .. " --output=fhelium.test_output spec/fixtures/skips_fixture.lua",
    { cwd = cli.root, env = env, merged = true })
end

describe("the skip report", function()
  it("counts skips by reason, names no helper, and keeps the last line", function()
    local r = run_fixture { FHELIUM_TEST_VERBOSE = false, CI = "true" }
    local out = r.output
    assert.equal(0, r.code, out)
    local lines = cli.lines(out)
    assert.equal("1 passed, 0 failed, 4 skipped", lines[#lines])
    assert.truthy(out:find("\nSkipped: 4\n  2 x needs a tool\n  1 x another reason\n" ..
      "  1 x skipped from inside the spec\n", 1, true), out)
    assert.falsy(out:find("helpers.lua", 1, true), out)
    assert.falsy(out:find("skips_fixture.lua:7", 1, true), out) -- no per-spec lines by default
  end)

  it("lists each skip with its spec file and line with FHELIUM_TEST_VERBOSE=1", function()
    local r = run_fixture { FHELIUM_TEST_VERBOSE = "1", CI = "true" }
    local out = r.output
    assert.equal(0, r.code, out)
    local f = "spec/fixtures/skips_fixture.lua"
    assert.truthy(out:find("  2 x needs a tool\n      " .. f .. ":7  skips first use of the tool\n      " ..
      f .. ":8  skips second use of the tool\n", 1, true), out)
    assert.truthy(out:find("  1 x another reason\n      " .. f .. ":9  skips direct skip\n", 1, true), out)
    assert.truthy(out:find("      " .. f .. ":11  skips is skipped from inside\n", 1, true), out)
    assert.falsy(out:find("helpers.lua", 1, true), out)
    local lines = cli.lines(out)
    assert.equal("1 passed, 0 failed, 4 skipped", lines[#lines])
  end)
end)
