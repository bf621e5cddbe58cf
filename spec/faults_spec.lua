-- Fault injection (docs/faults.md). The specs drive the fault build
-- (FHELIUM_FAULTS_BUILD, default build-faults: scripts/faults makes it, with
-- ASan) in subprocesses; without one they are skipped with the reason. The
-- spec process's own build must not have fault injection.
local fh = require "fhelium"
local cli = require "spec.support.cli"
local H = require "spec.helpers"

local fbuild = os.getenv("FHELIUM_FAULTS_BUILD") or "build-faults"
if fbuild:sub(1, 1) ~= "/" then fbuild = cli.root .. "/" .. fbuild end
local fbin = fbuild .. "/fhelium"
local f = io.open(fbin)
local have = f ~= nil
if f then f:close() end
local why = "no fault build at " .. fbin .. " (scripts/faults builds it: -DFHELIUM_FAULTS=ON)"

local function fit(name, fn)
  if not have then return H.skip_it(name, why) end
  return it(name, fn)
end

-- run a chunk in the fault build; the chunk prints lines "key=value"
local function frun(code, env)
  local e = { ASAN_OPTIONS = "detect_leaks=0:allocator_may_return_null=1:halt_on_error=1" }
  for k, v in pairs(env or {}) do e[k] = v end
  local r = cli.sh(cli.quote(fbin) .. " -e " .. cli.quote(code), { env = e })
  local kv = {}
  for _, l in ipairs(cli.lines(r.stdout)) do
    local k, v = l:match("^([%w_]+)=(.*)$")
    if k then kv[k] = v end
  end
  return r, kv
end

describe("fault injection", function()
  it("is absent from a normal build: no fh._faults, FHELIUM_FAULT_ALLOC is ignored", function()
    assert.is_nil(fh._faults)
    assert.is_nil(fh._faults_arm)
    local r = cli.run({ "-e", 'local fh = require "fhelium" print(fh._faults == nil, fh.zeros({3}):tolist()[3])' },
      { env = { FHELIUM_FAULT_ALLOC = "1", FHELIUM_FAULT_IO = "1" } })
    assert.equals(0, r.code, r.stderr)
    assert.matches("^true\t0", r.stdout)
  end)

  fit("FHELIUM_FAULT_ALLOC=N fails the N-th allocation: a MemoryError naming the function, the tensors unchanged",
    function()
    local code = [[
      local fh = require "fhelium"
      local keep = { fh.arange(4, { dtype = "float64" }) }
      local before = fh._faults().alloc
      local ok, err = pcall(fh.zeros, { 8 })
      if not ok then keep[2] = "failed" else keep[2] = err end
      print("before=" .. before)
      print("ok=" .. tostring(ok))
      print("kind=" .. tostring(ok or err.kind))
      print("message=" .. tostring(ok or err.message))
      print("injected=" .. fh._faults().alloc_injected)
      print("keep=" .. #keep .. " " .. tostring(keep[1]:tolist()[4]))
      print("after=" .. tostring(fh.zeros({ 2 }):tolist()[2]))
    ]]
    local r0, clean = frun(code)
    assert.equals(0, r0.code, r0.stderr)
    assert.equals("true", clean.ok)
    local n = tonumber(clean.before) + 1
    local r, kv = frun(code, { FHELIUM_FAULT_ALLOC = tostring(n) })
    assert.equals(0, r.code, r.stderr)
    assert.equals("false", kv.ok)
    assert.equals("MemoryError", kv.kind)
    assert.matches("^fh%.zeros: out of memory", kv.message)
    assert.equals("1", kv.injected)
    assert.equals("2 3", kv.keep) -- the table and the existing tensor are untouched
    assert.equals("0", kv.after) -- the next allocation succeeds
  end)

  fit("every I/O call of fh.save fails cleanly: an IOError naming fh.save, the old file intact or the new one whole",
    function()
    local dir = os.tmpname()
    os.remove(dir)
    local code = ([[
      local fh = require "fhelium"
      local dir = %q
      os.execute("mkdir -p " .. dir)
      local path = dir .. "/v.fh"
      local old, new = fh.arange(6, { dtype = "float64" }), fh.ones({ 3 }, { dtype = "int64" })
      fh.save({ x = old }, path)
      local function bytes() local f = io.open(path, "rb") local s = f:read("*a") f:close() return s end
      local old_bytes = bytes()
      for n = 1, 100 do
        local before = fh._faults().io_injected
        fh._faults_arm("io", n)
        local ok, err = pcall(fh.save, { y = new }, path, { overwrite = true })
        fh._faults_arm("io", 0)
        if fh._faults().io_injected == before then print("sites=" .. (n - 1)) break end
        local t = fh.load(path)
        local state = bytes() == old_bytes and "old" or (t.y and fh.equal(t.y, new) and "new") or "broken"
        local p = io.popen("ls -a " .. dir) local ls = p:read("*a") p:close()
        print(("run%%d=%%s|%%s|%%s|%%s"):format(n, tostring(ok), ok and "" or err.kind,
          ok and "" or err.message:match("^[^:]+"), state .. (ls:find("tmp", 1, true) and " tmp" or "")))
        if bytes() ~= old_bytes then fh.save({ x = old }, path, { overwrite = true }) end
      end
      os.execute("rm -rf " .. dir)
    ]]):format(dir)
    local r, kv = frun(code)
    assert.equals(0, r.code, r.stderr)
    local sites = tonumber(kv.sites)
    assert.is_true(sites ~= nil and sites >= 5, "expected the save's I/O calls to be counted: " .. r.stdout)
    for n = 1, sites do
      local ok, kind, fname, state = (kv["run" .. n] or ""):match("^(%a+)|(%a*)|([^|]*)|(.*)$")
      if ok == "true" then
        -- only the directory's fsync may go unreported (a directory that cannot be opened is left to the file system)
        assert.equals("new", state, "run " .. n .. ": " .. tostring(kv["run" .. n]))
      else
        assert.equals("IOError", kind)
        assert.equals("fh.save", fname)
      end
      -- before the rename the old file is intact; after it (the directory's
      -- fsync) the new one is whole; never a temporary file left behind
      assert.is_truthy(state == "old" or state == "new", "run " .. n .. ": " .. state)
    end
    assert.equals("old", kv.run1:match("[^|]*$")) -- the temporary file could not even be made
  end)

  fit("every allocation of fh.save and fh.load fails cleanly (no double release: a failed tree walk's signature)",
    function()
    local code = [[
      local fh = require "fhelium"
      local path = os.tmpname()
      local tree = { a = fh.arange(5, { dtype = "float64" }), b = { fh.ones({ 2 }), fh.zeros({ 3 }) } }
      local sites, bad = 0, {}
      fh.save(tree, path, { overwrite = true })
      for _, op in ipairs { "save", "save1", "load" } do
        for n = 1, 1000 do
          local before = fh._faults().alloc_injected
          fh._faults_arm("alloc", n)
          local ok, err
          if op == "save" then ok, err = pcall(fh.save, tree, path, { overwrite = true })
          elseif op == "save1" then ok, err = pcall(fh.save, tree.a, path .. "1", { overwrite = true }) -- a leaf as the root
          else ok, err = pcall(fh.load, path) end
          fh._faults_arm("alloc", 0)
          if fh._faults().alloc_injected == before then break end
          sites = sites + 1
          if not ok and not (err.kind == "MemoryError" and err.message:find("^fh%." .. op:gsub("1", "") .. ": ")) then
            bad[#bad + 1] = op .. n .. ": " .. tostring(err)
          end
          local back = fh.load(path)
          if not fh.equal(back.a, tree.a) then bad[#bad + 1] = op .. n .. ": the file changed" end
          collectgarbage()
        end
      end
      os.remove(path)
      os.remove(path .. "1")
      print("sites=" .. sites)
      print("bad=" .. table.concat(bad, "; "))
    ]]
    local r, kv = frun(code)
    assert.equals(0, r.code, r.stderr)
    assert.is_true(tonumber(kv.sites) >= 10, r.stdout)
    assert.equals("", kv.bad)
  end)

  fit("a failed copy_from leaves the buffer's value unchanged", function()
    local code = [[
      local fh = require "fhelium"
      local ex = require "fhelium.execution"
      local a, b = fh.arange(8, { dtype = "float64" }), fh.ones({ 8 }, { dtype = "float64" })
      local buf = ex.ReusableValueBuffer.like({ a, a:clone() })
      buf:copy_from({ a, a })
      local fired, bad = 0, {}
      for n = 1, 200 do
        local before = fh._faults().alloc_injected
        fh._faults_arm("alloc", n)
        local ok, err = pcall(buf.copy_from, buf, { b, b })
        fh._faults_arm("alloc", 0)
        if fh._faults().alloc_injected == before then break end
        fired = fired + 1
        local v = buf.value
        if ok then
          if not (fh.equal(v[1], b) and fh.equal(v[2], b)) then bad[#bad + 1] = n .. ": half copied" end
        else
          if err.kind ~= "MemoryError" or not err.message:find("^ReusableValueBuffer:copy_from: ") then
            bad[#bad + 1] = n .. ": " .. tostring(err)
          end
          if not (fh.equal(v[1], a) and fh.equal(v[2], a)) then bad[#bad + 1] = n .. ": the buffer changed" end
        end
        buf:copy_from({ a, a })
      end
      print("fired=" .. fired)
      print("bad=" .. table.concat(bad, "; "))
      buf:close()
    ]]
    local r, kv = frun(code)
    assert.equals(0, r.code, r.stderr)
    assert.is_true(tonumber(kv.fired) >= 1, r.stdout)
    assert.equals("", kv.bad)
  end)

  fit("fh._faults_arm checks its arguments", function()
    local r = frun([[
      local fh = require "fhelium"
      local ok, err = pcall(fh._faults_arm, "disk", 1)
      print("e1=" .. err.kind .. " " .. err.message)
      ok, err = pcall(fh._faults_arm, "io", -1)
      print("e2=" .. err.kind .. " " .. err.message)
    ]])
    assert.equals(0, r.code, r.stderr)
    assert.matches("e1=ValueError fh%._faults_arm: argument 1 %(site%) expected \"alloc\" or \"io\", got disk", r.stdout)
    assert.matches("e2=ValueError fh%._faults_arm: n must be an integer in %[0, ", r.stdout)
  end)
end)
