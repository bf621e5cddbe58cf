-- The examples run through the `fhelium` executable and print what the API
-- computes (the README's first command runs examples/quickstart.lua).
local fh = require "fhelium"
local cli = require "spec.support.cli"
local H = require "spec.helpers"

local mulmod = H.mulmod

describe("examples/quickstart.lua", function()
  local r = cli.run { cli.root .. "/examples/quickstart.lua" }

  it("runs without errors", function()
    assert.equal("", r.stderr)
    assert.equal(0, r.code)
  end)

  it("prints tensors and their arithmetic as the API computes them", function()
    local a = fh.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = "float64" })
    local b = fh.arange(6, { dtype = "float64" }):view({ 2, 3 })
    for _, t in ipairs { a, b, a + b, a * b - 1, -a / 2, b:transpose(1, 2) } do
      assert.truthy(r.stdout:find(tostring(t), 1, true), tostring(t))
    end
    assert.truthy(r.stdout:find("columns 2..3 of a, strides {3, 1}\n" .. tostring(a:narrow(2, 2, 2)), 1, true),
      r.stdout)
    assert.truthy(r.stdout:find("strides {1, 3}, contiguous: false", 1, true))
  end)

  it("prints RNS products that match a reference modular multiply", function()
    local q = { 1152921504606584833ULL, 1152921504598720513ULL }
    local x = { { 1ULL, 2ULL, q[1] - 1ULL, 123456789ULL }, { 5ULL, q[2] - 2ULL, 7ULL, 1ULL } }
    local y = { { 3ULL, q[1] - 1ULL, 2ULL, 987654321ULL }, { q[2] - 5ULL, 4ULL, 6ULL, 1ULL } }
    local expected = {}
    for i = 1, 2 do
      expected[i] = {}
      for j = 1, 4 do expected[i][j] = mulmod(x[i][j], y[i][j], q[i]) end
    end
    local tx, ty = fh.tensor(x, { dtype = "uint64" }), fh.tensor(y, { dtype = "uint64" })
    local prod = fh.rns.mul(tx, ty, q)
    assert.same(expected, prod:tolist())
    assert.truthy(r.stdout:find("-- fh.rns.mul(x, y, q)\n" .. tostring(prod), 1, true), r.stdout)
    assert.truthy(r.stdout:find("= 1ULL (expected 1)", 1, true))
  end)
end)

describe("examples/matrix_vector.lua (the README's main job)", function()
  local function bound_of(out) return tonumber(out:match("error bound (%S+):")) end

  it("--device auto (the default) takes the GPU when there is one, else the CPU", function()
    local r = cli.run { cli.root .. "/examples/matrix_vector.lua", "--size", "2" }
    assert.equal(0, r.code, r.stderr)
    local want = fh.cuda.is_available() and "device cuda:0" or "device cpu"
    assert.truthy(r.stdout:find(want, 1, true), r.stdout)
    assert.truthy(r.stdout:find(fh.cuda.is_available() and "CudaGraphProgram" or "HostGraphProgram", 1, true))
  end)

  for _, size in ipairs(os.getenv("FHELIUM_SLOW") == "1" and { 8, 64, 256 } or { 8, 64 }) do
    H.gpu_it(("runs on cuda:0 as a CudaGraphProgram, replays bit-identical to eager, size %d"):format(size), function()
      local r = cli.run { cli.root .. "/examples/matrix_vector.lua", "--device", "cuda", "--size", tostring(size) }
      assert.equal("", r.stderr)
      assert.equal(0, r.code)
      assert.truthy(r.stdout:find("device cuda:0", 1, true), r.stdout)
      assert.truthy(r.stdout:find("CudaGraphProgram: %d+ launches captured"), r.stdout)
      local rows = 0
      for line in r.stdout:gmatch("[^\n]+") do
        local bitwise, status = line:match("^%d+%s+%S+%s+%S+%s+%S+%s+%S+%s+%S+%s+(%S+)%s+(%S+)$")
        if status then
          rows = rows + 1
          assert.equal("equal", bitwise, line)
          assert.equal("ok", status, line)
        end
      end
      assert.equal(3, rows)
      assert.truthy(r.stdout:find("PASS\n$"), r.stdout)
    end)
  end

  it("captures the CKKS program, replays it bit-identically to eager runs, within tolerance", function()
    local r = cli.run { cli.root .. "/examples/matrix_vector.lua", "--device", "cpu", "--size", "4" }
    assert.equal("", r.stderr)
    assert.equal(0, r.code)
    assert.truthy(r.stdout:find("HostGraphProgram: %d+ launches captured"), r.stdout)
    local rows = 0
    for line in r.stdout:gmatch("[^\n]+") do
      local e_err, r_err, bitwise, status = line:match("^%d+%s+%S+%s+(%S+)%s+(%S+)%s+%S+%s+%S+%s+(%S+)%s+(%S+)$")
      if status then
        rows = rows + 1
        assert.is_true(tonumber(e_err) < bound_of(r.stdout) and tonumber(r_err) < bound_of(r.stdout), line)
        assert.equal("equal", bitwise)
        assert.equal("ok", status)
      end
    end
    assert.equal(3, rows)
    assert.truthy(r.stdout:find("PASS\n$"), r.stdout)
  end)

  it("works for every size, including 2 (a two-element diagonal is two real slots)", function()
    for _, n in ipairs { 1, 2, 3 } do
      local r = cli.run { cli.root .. "/examples/matrix_vector.lua", "--device", "cpu", "--size", tostring(n) }
      assert.equal("", r.stderr)
      assert.equal(0, r.code, r.stdout)
      assert.truthy(r.stdout:find("PASS\n$"), r.stdout)
    end
  end)

  it("passes with a 30-bit-scale preset: its bound follows the scale", function()
    local r = cli.run { cli.root .. "/examples/matrix_vector.lua", "--device", "cpu", "--size", "4", "--preset",
      fh.Preset.slots8192_scale30_levels9_int64 }
    assert.equal("", r.stderr)
    assert.equal(0, r.code, r.stdout)
    assert.truthy(r.stdout:find("PASS\n$"), r.stdout)
    local b30 = bound_of(r.stdout)
    -- the 40-bit bound is about 2^10 times smaller (the noise is the same in
    -- absolute terms, the scale is 2^10 larger)
    local r40 = cli.run { cli.root .. "/examples/matrix_vector.lua", "--device", "cpu", "--size", "4" }
    local b40 = bound_of(r40.stdout)
    assert.truthy(b30 and b40, r.stdout .. r40.stdout)
    assert.is_true(b30 / b40 > 2 ^ 9 and b30 / b40 < 2 ^ 11, ("bounds %g and %g"):format(b30, b40))
    -- and it is far above what a correct run shows but far below a wrong one
    local worst = tonumber(r.stdout:match("worst error (%S+)"))
    assert.is_true(worst < b30, r.stdout)
    assert.is_true(b30 < 1e-2, r.stdout)
  end)

  it("exits 1 and reports FAIL when a result is outside the bound", function()
    local ok = cli.run { cli.root .. "/examples/matrix_vector.lua", "--device", "cpu", "--size", "3" }
    local bound = bound_of(ok.stdout)
    assert.truthy(bound, ok.stdout)
    local r = cli.run { cli.root .. "/examples/matrix_vector.lua", "--device", "cpu", "--size", "3", "--inject-error", tostring(3 * bound) }
    assert.equal(1, r.code, r.stdout)
    assert.truthy(r.stdout:find("FAILED", 1, true), r.stdout)
    assert.truthy(r.stdout:find("FAIL\n$"), r.stdout)
  end)

  it("rejects unknown options with a usage message", function()
    local r = cli.run { cli.root .. "/examples/matrix_vector.lua", "--device", "cpu", "--bogus", "1" }
    assert.equal(2, r.code)
    assert.truthy(r.stderr:find("usage: matrix_vector.lua"), r.stderr)
    r = cli.run { cli.root .. "/examples/matrix_vector.lua", "--device", "cpu", "--size", "two" }
    assert.equal(2, r.code)
    assert.truthy(r.stderr:find("usage: matrix_vector.lua"), r.stderr)
  end)
end)

describe("examples/encrypted_pipeline.lua", function()
  it("pushes encrypted requests through the ring and checks every result (on the cpu here)", function()
    local args = { cli.root .. "/examples/encrypted_pipeline.lua", "--requests", "5", "--size", "4", "--slots", "3",
      "--streams", "1" }
    if not fh.cuda.is_available() then
      args[#args + 1] = "--device"
      args[#args + 1] = "cpu"
    end
    local r = cli.run(args)
    assert.equal("", r.stderr)
    assert.equal(0, r.code)
    assert.truthy(r.stdout:find("stages alone over 5 requests: copy in +[%d.]+ ms, compute +[%d.]+ ms, copy out"),
      r.stdout)
    for _, row in ipairs { "serial %(each request alone%)", "bound max%(copies, compute%)",
      "pipelined %(3 slots, 1 stream%)" } do
      assert.truthy(r.stdout:find(row .. " +[%d.]+ ms +[%d.]+ requests/s"), row .. "\n" .. r.stdout)
    end
    assert.truthy(r.stdout:find("speed%-up over serial [%d.]+x; pipelined / bound [%d.]+; overlap achieved"),
      r.stdout)
    assert.truthy(r.stdout:find("results: 5 of 5 within [%d.]+e%-%d+ of the plaintext product %(worst [%d.e+-]+%), 5 of 5 "
      .. "bit%-identical to eager: PASS\n$"), r.stdout)
  end)

  it("writes the trace of the pipelined run as JSON and SVG", function()
    local prefix = os.tmpname()
    os.remove(prefix)
    local r = cli.run { cli.root .. "/examples/encrypted_pipeline.lua", "--requests", "2", "--size", "2",
      "--device", "cpu", "--trace", prefix }
    assert.equal(0, r.code, r.stderr)
    assert.truthy(r.stdout:find("trace: fhelium.Trace(1 tracks, ", 1, true), r.stdout)
    local j = assert(io.open(prefix .. ".json")):read("*a")
    local doc = require("dkjson").decode(j)
    local replays = 0
    for _, e in ipairs(doc.traceEvents) do if e.cat == "replay" then replays = replays + 1 end end
    assert.equal(2, replays)
    assert.truthy(assert(io.open(prefix .. ".svg")):read("*a"):find("</svg>", 1, true))
    os.remove(prefix .. ".json")
    os.remove(prefix .. ".svg")
  end)

  it("encrypts requests at the level the program needs, or at --level", function()
    for _, c in ipairs { { nil, "level 5 %(3 Q primes%)", "0.75 MiB" }, { "0", "level 0 %(8 Q primes%)", "2.00 MiB" } } do
      local args = { cli.root .. "/examples/encrypted_pipeline.lua", "--requests", "2", "--size", "2", "--device", "cpu" }
      if c[1] then
        args[#args + 1] = "--level"
        args[#args + 1] = c[1]
      end
      local r = cli.run(args)
      assert.equal(0, r.code, r.stderr)
      assert.truthy(r.stdout:find(c[2]), r.stdout)
      assert.truthy(r.stdout:find(c[3], 1, true), r.stdout)
      assert.truthy(r.stdout:find("results: 2 of 2 within", 1, true), r.stdout)
    end
  end)

  it("rejects unknown options and bad values with a usage message", function()
    for _, a in ipairs { { "--bogus", "1" }, { "--slots", "two" }, { "--slots", "0" }, { "--level", "6" },
      { "--level", "-1" }, { "--level", "1.5" } } do
      local r = cli.run { cli.root .. "/examples/encrypted_pipeline.lua", a[1], a[2] }
      assert.equal(2, r.code)
      assert.truthy(r.stderr:find("usage: encrypted_pipeline.lua"), r.stderr)
    end
    local r = cli.run { cli.root .. "/examples/encrypted_pipeline.lua", "--level", "6", "--device", "cpu" }
    assert.truthy(r.stderr:find("--level must be an integer in 0..5 (the program rescales once)", 1, true), r.stderr)
  end)
end)
