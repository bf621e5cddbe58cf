-- scripts/bench/ab.lua (an A/B of kernel switches in one run), short, on the CPU in a
-- subprocess: both settings' runs and the comparison table, one row per operation with the
-- ratio to the first setting; bad settings exit 2 with the usage. FHELIUM_CUDA_FOLD is a
-- setting the CPU takes too (docs/ckks.md, "Sources scaled by the INTT").
local cli = require "spec.support.cli"

local AB = cli.root .. "/scripts/bench/ab.lua"

local function report(r) return ("exit %s\nstdout:\n%s\nstderr:\n%s"):format(tostring(r.code), r.stdout, r.stderr) end

describe("scripts/bench/ab.lua", function()
  it("runs ckks.lua once per setting and compares their times", function()
    local r = cli.run { AB, "FHELIUM_CUDA_FOLD=0", "FHELIUM_CUDA_FOLD=1,FHELIUM_CUDA_RAW=", "--", "--slots", "8192",
      "--min-time", "0.001", "--matvec", "2" }
    local what = report(r)
    assert(r.code == 0, what)
    local out = r.stdout
    assert.truthy(out:find("==== setting 1: FHELIUM_CUDA_FOLD=0\n", 1, true), what)
    assert.truthy(out:find("==== setting 2: FHELIUM_CUDA_FOLD=1,FHELIUM_CUDA_RAW=\n", 1, true), what)
    assert.truthy(out:find("A/B of 2 settings (ckks.lua --slots 8192 --min-time 0.001 --matvec 2):", 1, true), what)
    for _, op in ipairs { "relinearize", "rotate", "rotate_8_hoisted", "mul_relin_rescale", "encrypt" } do
      assert.truthy(out:find("\n" .. op .. ", 8192 slots +| +[%d.]+ +| +[%d.]+ +[%d.]+x\n"), op .. "\n" .. what)
    end
    assert.truthy(out:find("\nmatrix%-vector 8192 slots size 2 +| +[%d.]+ +| +[%d.]+ +[%d.]+x\n"), what)
  end)

  it("refuses fewer than two settings and malformed ones, and stops at a run that fails", function()
    for _, case in ipairs {
      { { "FHELIUM_CUDA_FOLD=1" }, "1 setting given, two or more expected" },
      { { "A=1", "B=2;rm" }, '"B=2;rm" is not VAR=value' },
      { { "A=1", "=2" }, '"=2" is not VAR=value' },
      { { "--", "--slots", "8192" }, "0 settings given" },
    } do
      local r = cli.run { AB, unpack(case[1]) }
      assert.are.equal(2, r.code, report(r))
      assert.truthy(r.stderr:find(case[2], 1, true), report(r))
      assert.truthy(r.stderr:find("usage: ab.lua", 1, true), report(r))
    end
    -- a run that fails stops the script with its output
    local r = cli.run { AB, "A=1", "B=2", "--", "--bogus" }
    assert.are.equal(1, r.code, report(r))
    assert.truthy(r.stderr:find("ab.lua: ckks.lua failed under A=1 (exit 2)", 1, true), report(r))
    assert.truthy(r.stdout:find("usage: ckks.lua", 1, true), report(r))
  end)
end)
